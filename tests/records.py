"""Building records in tests (the typed envelope, vitbench.record.Record) without measuring anything."""

from __future__ import annotations

from vitbench.record import ErrorInfo, Record, Status


def record(kind: str, config: dict, *, status: str = "ok", error: dict | ErrorInfo | None = None,
           metrics: dict | None = None, raw: dict | None = None, env: dict | None = None, **fields) -> Record:
    """A record as a task would return it, with envelope fields (key, study, run_id, repeat, trial, runner,
    finished_at, ...) set as given."""
    if isinstance(error, dict):
        error = ErrorInfo(error["type"], error["message"], error.get("tail"))
    rec = Record.measured(kind, config, metrics=metrics, raw=raw, env=env, status=Status(status), error=error)
    return with_fields(rec, **fields)


def with_fields(rec: Record, **fields) -> Record:
    for k, v in fields.items():
        if not hasattr(rec, k):
            raise AttributeError(f"Record has no field {k!r}")
        setattr(rec, k, v)
    return rec


def job(config: dict, key: str = "k", study: str = "s", **fields):
    """A sweep job for `config`, as the runner would hand it to an executor."""
    from vitbench.executors import Job
    from vitbench.tasks import get_task

    return Job(key=key, config=config, repeat=fields.pop("repeat", 0), study=study, study_sha=fields.pop(
        "study_sha", "0" * 64), run_id=fields.pop("run_id", "run"), timeout_s=fields.pop("timeout_s", 600),
        task_module=get_task(config["task"]).__module__, **fields)
