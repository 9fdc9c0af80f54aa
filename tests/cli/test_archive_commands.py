"""The archive's commands end to end: fold, status, audit, show, verify and restore
against a real Valkey and a real SeaweedFS, configured from the environment."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from echomq.cli.archive import archive_cli
from echomq.servers.seaweed import SeaweedS3
from tests.support.archive import remote_on
from tests.support.recorder import Recorder


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(archive_cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_the_command_line(rec: Recorder, server_url: str, seaweed: SeaweedS3,
                          tmp_path: Path, monkeypatch: object) -> None:
    rec.add(12)
    rec.malformed()
    bucket = f"cli-{rec.queue[2:]}"
    remote_on(seaweed, bucket)  # create the bucket
    env = {"EMQ_S3_BUCKET": bucket, "EMQ_S3_ENDPOINT_URL": seaweed.endpoint_url,
           "EMQ_S3_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": seaweed.access_key,
           "AWS_SECRET_ACCESS_KEY": seaweed.secret_key, "EMQ_URL": server_url,
           "EMQ_FLOOR": str(tmp_path / "floor")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # type: ignore[attr-defined]
    code, out = invoke("fold", rec.queue, "--json", "--slice-count", "5")
    assert code == 0 and json.loads(out)["entries"] == 13
    code, out = invoke("status", "--json")
    assert json.loads(out)["entries"] == 12 and json.loads(out)["quarantined"] == 1
    code, out = invoke("audit", rec.queue, "--outcome", "dead", "--json")
    assert [json.loads(line)["job_id"] for line in out.splitlines()] == [
        "job-2", "job-5", "job-8", "job-11"]
    code, out = invoke("audit", rec.queue, "--since", "1700000000003", "--until",
                       "2023-11-14T22:13:20.006", "--json", "--quarantine")
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r.get("job_id") for r in rows] == ["job-3", "job-4", "job-5", None]
    code, out = invoke("show", rec.queue, "job-4", "--json")
    assert code == 0 and json.loads(out)["outcome"] == "cancelled"
    code, _ = invoke("show", rec.queue, "nobody")
    assert code == 1
    code, out = invoke("verify", "--json")
    assert code == 0 and json.loads(out)["slices"] == 3
    code, out = invoke("restore", "--floor", str(tmp_path / "again"), "--json")
    assert code == 0 and json.loads(out)["entries"] == 12
    code, out = invoke("status")  # the table form, for people
    assert code == 0 and "checkpoint" in out and rec.queue in out
    code, out = invoke("fold", "--bucket", "", rec.queue)
    assert code == 0
