"""``emq dashboard``: what it refuses before serving, what it does not import, and where
it takes its token from."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from echomq.cli import main
from tests.cli.test_cli_faces import loaded_after
from tests.web.served import dashboard, status


def test_the_help_and_a_worker_load_no_web_module() -> None:
    for argv in (["dashboard", "--help"], ["worker", "--help"]):
        loaded = loaded_after(f"from echomq.cli import main\nmain({argv!r})")
        assert not {"starlette", "jinja2", "uvicorn"} & set(loaded), (argv, loaded)


def test_another_host_needs_a_token_or_read_only(server_url: str) -> None:
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard", "--host", "0.0.0.0"])
    assert done.exit_code == 2 and "or --read-only" in done.output
    assert "EMQ_DASHBOARD_TOKEN" in done.output


def test_an_empty_token_is_refused(server_url: str) -> None:
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard", "--token", " "])
    assert done.exit_code == 2 and "must not be empty" in done.output


def test_the_token_comes_from_a_file_or_the_environment(server_url: str,
                                                         tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("from-a-file\n")
    secret.chmod(0o600)
    for args, env, token in ((["--token-file", str(secret)], {}, "from-a-file"),
                             ([], {"EMQ_DASHBOARD_TOKEN": "from-the-env"}, "from-the-env")):
        with dashboard(server_url, *args, env=env) as served:
            assert status(served.url + "/") == 401
            assert status(served.url + "/", authorization=f"Bearer {token}") == 200
        assert "warning" not in served.stderr, served.stderr


def test_a_token_in_argv_works_and_warns(server_url: str) -> None:
    with dashboard(server_url, "--token", "in-argv") as served:
        assert status(served.url + "/", authorization="Bearer in-argv") == 200
    assert "warning: --token shows the token to every local user" in served.stderr
    assert "EMQ_DASHBOARD_TOKEN or --token-file" in served.stderr


def test_a_token_file_others_can_read_is_refused(server_url: str, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("t\n")
    secret.chmod(0o644)
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard",
                                     "--token-file", str(secret)])
    assert done.exit_code == 2 and "open to group or others (mode 0644)" in done.output
    secret.chmod(0o600)
    secret.write_text("\n")
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard",
                                     "--token-file", str(secret)])
    assert done.exit_code == 2 and "must not be empty" in done.output
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard",
                                     "--session-ttl", "12"])
    assert done.exit_code == 2 and "not a duration" in done.output
