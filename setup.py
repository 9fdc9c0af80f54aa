"""The optional C accelerator of the archive's fold (everything else is in pyproject.toml).

``optional=True``: where no C compiler is found the install still succeeds and the fold
runs its Python path, which gives the same bytes (tests/archive/test_fold_accel.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("echomq.archive._fold", ["echomq/archive/_fold.c"],
                             optional=True, extra_compile_args=["-O2"])])
