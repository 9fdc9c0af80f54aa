/* The fold's two per-entry loops in C: optional, byte for byte what the Python does.
 *
 * take()  is stream_read.read_items' inner loop: an XRANGE page into (id, fields, line)
 *         items, each line the canonical JSON of entries.entry_line, stopping at a size.
 * rows()  is floor_rows.index_rows: the key/value pairs a slice adds to the floor's
 *         databases.
 *
 * Only the common shape is handled here: every entry that is anything else (a field named
 * twice, a value that is not UTF-8, a malformed outcome, a job id that is not a valid
 * name, a stream id that is not two decimal numbers) goes to the Python function the
 * caller passes, which applies the full rules. tests/archive/test_fold_accel.py holds the
 * two paths equal on generated entries. Python code never imports this module directly:
 * echomq.archive.accel chooses it or the Python path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *s_job, *s_outcome, *s_attempts, *s_at;  /* interned field names */
static const char *OUTCOMES[3] = {"completed", "cancelled", "dead"};

/* -- a scratch buffer for one line (the GIL is held throughout) ----------------------- */

static char *scratch = NULL;
static Py_ssize_t scratch_cap = 0;

static int reserve(Py_ssize_t need) {
    if (need <= scratch_cap)
        return 0;
    Py_ssize_t cap = scratch_cap ? scratch_cap : 4096;
    while (cap < need)
        cap *= 2;
    char *grown = PyMem_Realloc(scratch, (size_t)cap);
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    scratch = grown;
    scratch_cap = cap;
    return 0;
}

/* A line of a huge entry (a recorded payload of many MB) leaves no huge buffer behind. */
static void release_big_scratch(void) {
    if (scratch_cap > (1 << 20)) {
        PyMem_Free(scratch);
        scratch = NULL;
        scratch_cap = 0;
    }
}

/* -- the canonical JSON line ------------------------------------------------------------ */

/* Appends `s` as a JSON string the way json.dumps(ensure_ascii=False) writes it: only the
 * quote, the backslash and the C0 controls are escaped. Returns the new length, or -1
 * with no exception set when `s` is not a str that encodes to UTF-8 (a lone surrogate:
 * the caller falls back to Python), or -1 with MemoryError. */
static Py_ssize_t put_string(Py_ssize_t at, PyObject *s) {
    static const char hex[] = "0123456789abcdef";
    Py_ssize_t n;
    const char *u;
    if (!PyUnicode_Check(s))
        return -1;
    u = PyUnicode_AsUTF8AndSize(s, &n);
    if (u == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError))
            PyErr_Clear();
        return -1;
    }
    Py_ssize_t extra = 0;  /* what the escapes add: a scratch no bigger than the line */
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c == '"' || c == '\\')
            extra += 1;
        else if (c < 0x20)
            extra += (c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') ? 1 : 5;
    }
    if (reserve(at + n + extra + 2) < 0)
        return -1;
    char *out = scratch + at;
    *out++ = '"';
    if (extra == 0) {
        memcpy(out, u, (size_t)n);
        out += n;
        n = 0;  /* nothing left to escape */
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\f': *out++ = 'f'; break;
        case '\n': *out++ = 'n'; break;
        case '\r': *out++ = 'r'; break;
        case '\t': *out++ = 't'; break;
        default:
            *out++ = 'u'; *out++ = '0'; *out++ = '0';
            *out++ = hex[c >> 4]; *out++ = hex[c & 15];
        }
    }
    *out++ = '"';
    return out - scratch;
}

static Py_ssize_t put_raw(Py_ssize_t at, const char *text, Py_ssize_t n) {
    if (reserve(at + n) < 0)
        return -1;
    memcpy(scratch + at, text, (size_t)n);
    return at + n;
}

/* {"id":<sid>,"fields":{<name>:<value>,...}} as bytes; NULL with no exception set when
 * some text is not UTF-8 (the caller falls back), NULL with an exception on failure. */
static PyObject *entry_line(PyObject *sid, PyObject *fields) {
    Py_ssize_t at = put_raw(0, "{\"id\":", 6), pos = 0;
    PyObject *name, *value;
    int first = 1;
    if (at < 0 || (at = put_string(at, sid)) < 0 || (at = put_raw(at, ",\"fields\":{", 11)) < 0)
        return NULL;
    while (PyDict_Next(fields, &pos, &name, &value)) {
        if (!first && (at = put_raw(at, ",", 1)) < 0)
            return NULL;
        first = 0;
        if ((at = put_string(at, name)) < 0 || (at = put_raw(at, ":", 1)) < 0
            || (at = put_string(at, value)) < 0)
            return NULL;
    }
    if ((at = put_raw(at, "}}", 2)) < 0)
        return NULL;
    return PyBytes_FromStringAndSize(scratch, at);
}

/* -- take: an XRANGE page into items ----------------------------------------------------- */

/* The fields of a flat [name, value, ...] list of str with no name twice, or NULL with no
 * exception set when the entry is anything else. */
static PyObject *plain_fields(PyObject *flat) {
    if (!PyList_CheckExact(flat) || PyList_GET_SIZE(flat) % 2)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(flat);
    PyObject *fields = _PyDict_NewPresized(n / 2);  /* no resize while it fills */
    if (fields == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i += 2) {
        PyObject *name = PyList_GET_ITEM(flat, i), *value = PyList_GET_ITEM(flat, i + 1);
        if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(value)
            || PyDict_SetItem(fields, name, value) < 0) {
            Py_DECREF(fields);
            PyErr_Clear();
            return NULL;
        }
    }
    if (PyDict_GET_SIZE(fields) * 2 != n) {
        Py_DECREF(fields);
        return NULL;
    }
    return fields;
}

/* One entry's (id, fields, line), in C when it has the common shape, else from `slow`. */
static PyObject *one_item(PyObject *entry, PyObject *slow) {
    if ((PyList_CheckExact(entry) || PyTuple_CheckExact(entry)) && Py_SIZE(entry) == 2) {
        PyObject *sid = PySequence_Fast_GET_ITEM(entry, 0);
        PyObject *fields = plain_fields(PySequence_Fast_GET_ITEM(entry, 1));
        if (fields != NULL) {
            PyObject *line = entry_line(sid, fields);
            if (line != NULL) {
                PyObject *item = PyTuple_Pack(3, sid, fields, line);
                Py_DECREF(fields);
                Py_DECREF(line);
                return item;
            }
            Py_DECREF(fields);
            if (PyErr_Occurred())
                return NULL;
        }
    }
    return PyObject_CallOneArg(slow, entry);
}

PyDoc_STRVAR(take_doc,
"take(raw, items, size, max_bytes, slow) -> (size, full)\n\n"
"Append raw XRANGE entries to items as (id, fields, line) until one would take the\n"
"lines past max_bytes (the first item is always taken); size counts each line plus\n"
"its newline. slow(entry) makes the item of an entry of any other shape.");

static PyObject *take(PyObject *module, PyObject *args) {
    PyObject *raw, *items, *slow, *seq;
    Py_ssize_t size, max_bytes;
    if (!PyArg_ParseTuple(args, "OO!nnO:take", &raw, &PyList_Type, &items, &size, &max_bytes,
                          &slow))
        return NULL;
    if ((seq = PySequence_Fast(raw, "raw must be a sequence")) == NULL)
        return NULL;
    int full = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = one_item(PySequence_Fast_GET_ITEM(seq, i), slow);
        if (item == NULL)
            goto fail;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3
            || !PyBytes_Check(PyTuple_GET_ITEM(item, 2))) {
            Py_DECREF(item);
            PyErr_SetString(PyExc_TypeError, "an item is (id, fields, line bytes)");
            goto fail;
        }
        Py_ssize_t grow = PyBytes_GET_SIZE(PyTuple_GET_ITEM(item, 2)) + 1;
        if (PyList_GET_SIZE(items) > 0 && size + grow > max_bytes) {
            Py_DECREF(item);
            full = 1;
            break;
        }
        int failed = PyList_Append(items, item);
        Py_DECREF(item);
        if (failed)
            goto fail;
        size += grow;
    }
    Py_DECREF(seq);
    release_big_scratch();
    return Py_BuildValue("(nO)", size, full ? Py_True : Py_False);
fail:
    Py_DECREF(seq);
    release_big_scratch();
    return NULL;
}

/* -- rows: a slice's index rows ---------------------------------------------------------- */

/* The decimal digits of `s` (ASCII, 1 to max_len of them) as a number; -1 otherwise. */
static int digits(PyObject *s, Py_ssize_t max_len, uint64_t *value) {
    if (s == NULL || !PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s))
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s);
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(s);
    if (n == 0 || n > max_len)
        return -1;
    uint64_t v = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        uint64_t d = (uint64_t)(p[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;  /* past 64 bits: Python refuses it with the reason */
        v = v * 10 + d;
    }
    *value = v;
    return 0;
}

static void put_u64(char *out, uint64_t v) {
    for (int i = 7; i >= 0; i--) {
        out[i] = (char)(v & 0xff);
        v >>= 8;
    }
}

/* The 16-byte key of a stream id "ms-seq" (stream_ids.id_key), or -1 for any other text. */
static int id_key(PyObject *sid, char out[16]) {
    if (!PyUnicode_Check(sid) || !PyUnicode_IS_ASCII(sid))
        return -1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(sid), dash = -1;
    const Py_UCS1 *p = PyUnicode_1BYTE_DATA(sid);
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] == '-') {
            dash = i;
            break;
        }
    if (dash <= 0 || dash == n - 1)
        return -1;
    uint64_t ms = 0, seq = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == dash)
            continue;
        if (p[i] < '0' || p[i] > '9')
            return -1;
        uint64_t *v = i < dash ? &ms : &seq, d = (uint64_t)(p[i] - '0');
        if (*v > (UINT64_MAX - d) / 10)
            return -1;
        *v = *v * 10 + d;
    }
    put_u64(out, ms);
    put_u64(out + 8, seq);
    return 0;
}

/* Whether a job id passes keys.check_name: 1 to max_bytes bytes of UTF-8 with no brace,
 * colon, whitespace or control character ([{}:\s\x00-\x1f\x7f-\x9f]). */
static int name_ok_c(PyObject *s, Py_ssize_t max_bytes) {
    if (!PyUnicode_Check(s))
        return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(s), size;
    if (n == 0)
        return 0;
    int kind = PyUnicode_KIND(s);
    const void *data = PyUnicode_DATA(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c == '{' || c == '}' || c == ':' || c < 0x20 || (c >= 0x7f && c <= 0x9f)
            || Py_UNICODE_ISSPACE(c) || (c >= 0xd800 && c <= 0xdfff))
            return 0;
    }
    if (PyUnicode_AsUTF8AndSize(s, &size) == NULL) {
        PyErr_Clear();
        return 0;
    }
    return size <= max_bytes;
}

PyDoc_STRVAR(name_ok_doc, "name_ok(value, max_bytes) -> bool: keys.check_name's rule.");

static PyObject *name_ok(PyObject *module, PyObject *args) {
    PyObject *s;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "On:name_ok", &s, &max_bytes))
        return NULL;
    return PyBool_FromLong(name_ok_c(s, max_bytes));
}

static PyObject *key_of(const char *a, Py_ssize_t na, const char *b, Py_ssize_t nb,
                        const char *c, Py_ssize_t nc, const char *d, Py_ssize_t nd) {
    PyObject *key = PyBytes_FromStringAndSize(NULL, na + nb + nc + nd);
    if (key == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(key);
    memcpy(out, a, (size_t)na);
    memcpy(out + na, b, (size_t)nb);
    memcpy(out + na + nb, c, (size_t)nc);
    memcpy(out + na + nb + nc, d, (size_t)nd);
    return key;
}

static int add_pair(PyObject *list, PyObject *key, PyObject *value) {
    if (key == NULL)
        return -1;
    PyObject *pair = PyTuple_Pack(2, key, value);
    Py_DECREF(key);
    if (pair == NULL)
        return -1;
    int failed = PyList_Append(list, pair);
    Py_DECREF(pair);
    return failed;
}

/* Whether the line holds floor_rows.ODD_TEXT (a backslash, then u) anywhere, as the Python
 * `ODD_TEXT in line` says: such an entry gets every check of malformed_reason. */
static int has_escape(PyObject *line) {
    const char *p = PyBytes_AS_STRING(line), *end = p + PyBytes_GET_SIZE(line);
    while ((p = memchr(p, '\\', (size_t)(end - p))) != NULL) {
        if (p + 1 < end && p[1] == 'u')
            return 1;
        p++;  /* the next byte may be a backslash too: "\\\\u" holds it from there */
    }
    return 0;
}

/* The index terms of a common entry: 0 and job/outcome/at set; -1 when it needs Python. */
static int fast_terms(PyObject *fields, PyObject *line, Py_ssize_t max_name,
                      PyObject **job, int *outcome, uint64_t *at) {
    uint64_t attempts;
    if (!PyDict_CheckExact(fields) || has_escape(line))
        return -1;
    PyObject *o = PyDict_GetItemWithError(fields, s_outcome);
    if (o == NULL || !PyUnicode_Check(o))
        return -1;
    *outcome = -1;
    for (int i = 0; i < 3; i++)
        if (PyUnicode_CompareWithASCIIString(o, OUTCOMES[i]) == 0)
            *outcome = i;
    if (*outcome < 0)
        return -1;
    if (digits(PyDict_GetItemWithError(fields, s_at), 19, at) < 0
        || digits(PyDict_GetItemWithError(fields, s_attempts), PY_SSIZE_T_MAX, &attempts) < 0)
        return -1;
    *job = PyDict_GetItemWithError(fields, s_job);
    if (*job == NULL || !name_ok_c(*job, max_name))
        return -1;
    return PyErr_Occurred() ? -2 : 0;
}

PyDoc_STRVAR(rows_doc,
"rows(qk, items, max_name, slow, slow_id_key)\n"
"    -> (entries, by_job, quarantine, by_completed, by_cancelled, by_dead)\n\n"
"floor_rows.index_rows' pairs for (id, fields, line) items, the time runs unsorted.\n"
"slow(fields, line) gives the (job, outcome, at) or the quarantine reason of an entry\n"
"not of the common shape; slow_id_key(id) the key of an id not of the form ms-seq.");

static PyObject *rows(PyObject *module, PyObject *args) {
    PyObject *items, *slow, *slow_id_key, *seq = NULL, *empty = NULL, *out[6] = {0};
    const char *qk;
    Py_ssize_t nqk, max_name;
    if (!PyArg_ParseTuple(args, "y#OnOO:rows", &qk, &nqk, &items, &max_name, &slow,
                          &slow_id_key))
        return NULL;
    if ((seq = PySequence_Fast(items, "items must be a sequence")) == NULL)
        return NULL;
    for (int i = 0; i < 6; i++)
        if ((out[i] = PyList_New(0)) == NULL)
            goto fail;
    if ((empty = PyBytes_FromStringAndSize(NULL, 0)) == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3
            || !PyBytes_Check(PyTuple_GET_ITEM(item, 2))) {
            PyErr_SetString(PyExc_TypeError, "an item is (id, fields, line bytes)");
            goto fail;
        }
        PyObject *sid = PyTuple_GET_ITEM(item, 0), *fields = PyTuple_GET_ITEM(item, 1);
        PyObject *line = PyTuple_GET_ITEM(item, 2), *job = NULL, *terms = NULL;
        char ik[16];
        if (id_key(sid, ik) < 0) {
            PyObject *key = PyObject_CallOneArg(slow_id_key, sid);
            if (key == NULL)
                goto fail;
            if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != 16) {
                Py_DECREF(key);
                PyErr_SetString(PyExc_TypeError, "an id key is 16 bytes");
                goto fail;
            }
            memcpy(ik, PyBytes_AS_STRING(key), 16);
            Py_DECREF(key);
        }
        int outcome;
        uint64_t at;
        int shape = fast_terms(fields, line, max_name, &job, &outcome, &at);
        if (shape == -2 || PyErr_Occurred())
            goto fail;
        if (shape < 0) {
            if ((terms = PyObject_CallFunctionObjArgs(slow, fields, line, NULL)) == NULL)
                goto fail;
            if (PyUnicode_Check(terms)) {  /* the reason it is quarantined */
                Py_DECREF(terms);
                if (add_pair(out[2], key_of(qk, nqk, ik, 16, "", 0, "", 0), line) < 0)
                    goto fail;
                continue;
            }
            PyObject *o;
            unsigned long long wide;
            if (!PyTuple_Check(terms) || PyTuple_GET_SIZE(terms) != 3) {
                PyErr_SetString(PyExc_TypeError, "terms are (job, outcome, at)");
                goto fail_terms;
            }
            job = PyTuple_GET_ITEM(terms, 0);
            o = PyTuple_GET_ITEM(terms, 1);
            outcome = -1;
            for (int k = 0; k < 3 && PyUnicode_Check(o); k++)
                if (PyUnicode_CompareWithASCIIString(o, OUTCOMES[k]) == 0)
                    outcome = k;
            wide = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(terms, 2));
            if (PyErr_Occurred())
                goto fail_terms;
            if (outcome < 0) {
                PyErr_Format(PyExc_ValueError, "unknown outcome %R", o);
                goto fail_terms;
            }
            at = (uint64_t)wide;
        }
        Py_ssize_t njob;
        const char *jobs = PyUnicode_AsUTF8AndSize(job, &njob);
        char atk[8];
        put_u64(atk, at);
        if (jobs == NULL
            || add_pair(out[0], key_of(qk, nqk, ik, 16, "", 0, "", 0), line) < 0
            || add_pair(out[1], key_of(qk, nqk, jobs, njob, "\0", 1, ik, 16), empty) < 0
            || add_pair(out[3 + outcome], key_of(qk, nqk, atk, 8, ik, 16, "", 0), empty) < 0)
            goto fail_terms;
        Py_XDECREF(terms);
        continue;
    fail_terms:
        Py_XDECREF(terms);
        goto fail;
    }
    Py_DECREF(seq);
    Py_DECREF(empty);
    return Py_BuildValue("(NNNNNN)", out[0], out[1], out[2], out[3], out[4], out[5]);
fail:
    Py_XDECREF(seq);
    Py_XDECREF(empty);
    for (int i = 0; i < 6; i++)
        Py_XDECREF(out[i]);
    return NULL;
}

static PyMethodDef methods[] = {
    {"take", take, METH_VARARGS, take_doc},
    {"rows", rows, METH_VARARGS, rows_doc},
    {"name_ok", name_ok, METH_VARARGS, name_ok_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fold",
    "The fold's per-entry loops in C (see echomq.archive.fold_accel).", -1, methods,
};

/* What accel.py expects: a module built from an older _fold.c (an editable install not
 * rebuilt since) is left unused rather than called with arguments it does not take. */
#define INTERFACE 1

PyMODINIT_FUNC PyInit__fold(void) {
    PyObject *m;
    if (!(s_job = PyUnicode_InternFromString("job"))
        || !(s_outcome = PyUnicode_InternFromString("outcome"))
        || !(s_attempts = PyUnicode_InternFromString("attempts"))
        || !(s_at = PyUnicode_InternFromString("at")))
        return NULL;
    if ((m = PyModule_Create(&module)) == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "INTERFACE", INTERFACE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
