"""Benchmark: the fixed CPU a job costs `wagent worker` (issue 43, "no fork per turn").

A probe job does what every job does before its own work: takes the process's runtime
(workers/runtime.get_runtime) and runs one statement on the database pool (`SELECT
pg_backend_pid()`, which it records in Redis, so the run also counts the PostgreSQL connections
the jobs used). `--jobs` probes are enqueued on a queue of the run's own, then `wagent worker
--burst` of `--source` (default this tree) drains them; the CPU of the worker and everything it
forked (getrusage of reaped children: the supervisor, its work process, RQ's work horses) is
measured, and a burst over an empty queue alike. The fixed CPU per job is the difference over
the number of jobs. Runs alternate between the trees given (`--source A --source B`), `--rounds`
times each, so a machine shared with other work weighs on both alike.

Safe anywhere: the queue and key prefix are fresh names, only those keys are deleted; the
database is only read (no schema is made).

Usage: .venv/bin/python bench/job_cpu.py [--source DIR ...] [--jobs 300] [--rounds 2]
       [--redis-url URL] [--postgres-url URL]
Redis from --redis-url or JOB_CPU_REDIS_URL (default redis://127.0.0.1:6379/10), PostgreSQL from
--postgres-url or TEST_POSTGRES_URL. Prints one JSON object per run, then a summary.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROBE = '''
from sqlalchemy import text


def probe(key):
    from workers.runtime import get_runtime

    runtime = get_runtime()
    with runtime.engine.connect() as connection:
        backend = connection.execute(text("SELECT pg_backend_pid()")).scalar()
    runtime.redis.sadd(key, backend)
'''


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(source: Path, jobs: int, *, redis_url: str, postgres_url: str,
             probe_dir: str) -> dict[str, Any]:
    """Enqueue `jobs` probes, drain them with `wagent worker --burst` of `source`."""
    import redis
    from rq import Queue

    name = f"jobcpu{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    queue = Queue(name, connection=client)
    backends = f"{name}:backends"
    sys.path.insert(0, probe_dir)
    for _ in range(jobs):
        queue.enqueue("wagent_job_probe.probe", backends, result_ttl=0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAGENT_", "DATABASE_"))}
    env.update({
        "DATABASE_URL": postgres_url, "REDIS_URL": redis_url, "REDIS_PREFIX": name,
        "QUEUE_NAME": name, "WHATSAPP_APP_SECRET": "jobcpu-app-secret",
        "WHATSAPP_VERIFY_TOKEN": "jobcpu-verify", "WHATSAPP_ACCESS_TOKEN": "jobcpu-token",
        "ANTHROPIC_API_KEY": "jobcpu-api-key", "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
        "GRAPH_API_BASE_URL": "http://127.0.0.1:9", "LOG_LEVEL": "WARNING",
        "WORKER_CPU": "normal", "PYTHONPATH": f"{source}{os.pathsep}{probe_dir}"})
    cpu, wall = _children_cpu(), time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cli.main", "worker", "--burst"], env=env,
                          cwd=source, capture_output=True, text=True, timeout=600)
    cpu, wall = _children_cpu() - cpu, time.monotonic() - wall
    left, connections = queue.count, client.scard(backends)
    for key in client.scan_iter(f"*{name}*"):
        client.delete(key)
    client.close()
    if done.returncode != 0 or left:
        raise RuntimeError(f"worker exited {done.returncode}, {left} jobs left: "
                           f"{done.stderr[-2000:]}")
    return {"source": str(source), "jobs": jobs, "cpu_s": round(cpu, 3),
            "wall_s": round(wall, 2), "postgres_connections": connections}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, action="append",
                        help="a product tree to run (repeatable; default: this one)")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--redis-url", default=os.environ.get(
        "JOB_CPU_REDIS_URL", "redis://127.0.0.1:6379/10"))
    parser.add_argument("--postgres-url", default=os.environ.get(
        "TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    args = parser.parse_args(argv)
    sources = [s.resolve() for s in (args.source or [ROOT])]
    per_job: dict[str, list[float]] = {str(s): [] for s in sources}
    with tempfile.TemporaryDirectory(prefix="wagent-jobcpu-") as probe_dir:
        (Path(probe_dir) / "wagent_job_probe.py").write_text(PROBE)
        for _ in range(args.rounds):
            for source in sources:
                common = {"redis_url": args.redis_url, "postgres_url": args.postgres_url,
                          "probe_dir": probe_dir}
                empty = run_once(source, 0, **common)
                full = run_once(source, args.jobs, **common)
                fixed = (full["cpu_s"] - empty["cpu_s"]) / args.jobs
                per_job[str(source)].append(fixed)
                print(json.dumps({"empty": empty, "full": full,
                                  "fixed_cpu_ms_per_job": round(fixed * 1000, 2)}), flush=True)
    print(json.dumps({"summary": {s: {"fixed_cpu_ms_per_job": [round(v * 1000, 2) for v in vs]}
                                  for s, vs in per_job.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
