"""Randomized fault runs, one seed after another, for a while: each is
tests/integration/test_fault_run.py's run (three brokers on etcd and S3 under idempotent load
and a consumer group, a seeded schedule of faults, every check at the end) with a seed of its
own. Prints each run's outcome as it ends and, at the end, the seeds that failed with their
faults and the first lines of what went wrong; exits 1 if any failed.

    python bench/fault_runs.py --minutes 30 --faults 8 --first-seed 100

A failed seed is rerun alone with
    KAFSCALE_FAULT_RUN_SEED=<seed> KAFSCALE_FAULT_RUN_FAULTS=<n> \\
        python -m pytest tests/integration/test_fault_run.py -k randomized -s
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_seed(seed: int, faults: int) -> tuple[bool, str]:
    env = {
        **os.environ,
        "KAFSCALE_FAULT_RUN_SEED": str(seed),
        "KAFSCALE_FAULT_RUN_FAULTS": str(faults),
    }
    test = "tests/integration/test_fault_run.py::test_a_randomized_fault_run"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", test],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.returncode == 0, done.stdout + done.stderr


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="run seeds for this long")
    parser.add_argument("--seeds", type=int, default=0, help="at most this many (0: no limit)")
    parser.add_argument("--faults", type=int, default=6, help="faults per run")
    parser.add_argument("--first-seed", type=int, default=1000)
    args = parser.parse_args()
    deadline = time.monotonic() + args.minutes * 60
    seed, runs, failed = args.first_seed, 0, []
    while time.monotonic() < deadline and (args.seeds == 0 or runs < args.seeds):
        started = time.monotonic()
        ok, output = run_seed(seed, args.faults)
        runs += 1
        print(
            f"seed {seed}: {'ok' if ok else 'FAILED'} in {time.monotonic() - started:.0f} s",
            flush=True,
        )
        if not ok:
            lines = [line for line in output.splitlines() if "seed " in line or "Error" in line]
            failed.append((seed, lines[:5]))
        seed += 1
    print(f"\n{runs} seeds run ({args.faults} faults each), {len(failed)} failed")
    for seed, lines in failed:
        print(f"seed {seed}:")
        for line in lines:
            print(f"  {line[:400]}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
