"""``emq dashboard``: what it refuses before serving, and what it does not import."""

from __future__ import annotations

from click.testing import CliRunner

from echomq.cli import main
from tests.cli.test_cli_faces import loaded_after


def test_the_help_and_a_worker_load_no_web_module() -> None:
    for argv in (["dashboard", "--help"], ["worker", "--help"]):
        loaded = loaded_after(f"from echomq.cli import main\nmain({argv!r})")
        assert not {"starlette", "jinja2", "uvicorn"} & set(loaded), (argv, loaded)


def test_another_host_needs_a_token_or_read_only(server_url: str) -> None:
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard", "--host", "0.0.0.0"])
    assert done.exit_code == 2 and "--token or --read-only" in done.output


def test_an_empty_token_is_refused(server_url: str) -> None:
    done = CliRunner().invoke(main, ["--url", server_url, "dashboard", "--token", " "])
    assert done.exit_code == 2 and "must not be empty" in done.output
