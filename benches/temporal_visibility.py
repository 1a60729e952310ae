"""How soon Temporal's visibility store lists a workflow that started: the
floor under the lag of a link's claims (the projection finds new workflows
by listing the link's filter; benches/temporal.rs measures the projection).

    python3 benches/temporal_visibility.py [--count 1000] [--window 10] [--every 0.1]

Starts its own `temporal server start-dev` (in memory) and the tests' worker
(tests/temporal/worker.py), starts --count MigrateUnit workflows 50 at a
time as the bench does, and lists `StartTime >= now - window` every
--every seconds with nothing else running, until each workflow was listed
once. Prints the delay from each workflow's start to the list that first
showed it (p50, p95, p99, max) and the list calls' own time.
"""

import argparse
import asyncio
import datetime
import os
import socket
import subprocess
import sys
import time

from temporalio.client import Client

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "temporal", "worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pct(values: list, p: float) -> float:
    values = sorted(values)
    return values[round((len(values) - 1) * p)] * 1000


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=0.1)
    args = parser.parse_args()
    port = free_port()
    address = f"127.0.0.1:{port}"
    ports = ["--port", str(port), "--http-port", str(free_port()), "--metrics-port", str(free_port()),
             "--ui-port", str(free_port())]
    server = subprocess.Popen(["temporal", "server", "start-dev", "--headless", "--ip", "127.0.0.1",
                               "--log-level", "error", *ports], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        for _ in range(100):
            try:
                client = await Client.connect(address, namespace="default")
                break
            except Exception:
                await asyncio.sleep(0.3)
        else:
            sys.exit("the dev server did not come up")
        worker = subprocess.Popen([sys.executable, WORKER, "run", "--address", address], stdout=subprocess.DEVNULL)
        starter = asyncio.create_subprocess_exec(sys.executable, WORKER, "start-many", "--address", address,
                                                 "--prefix", "vis-", "--count", str(args.count))
        starting = await starter
        seen, delays, calls = set(), [], []
        deadline = time.time() + 120
        while len(seen) < args.count and time.time() < deadline:
            t0 = time.time()
            since = datetime.datetime.fromtimestamp(t0 - args.window, datetime.timezone.utc).isoformat()
            async for wf in client.list_workflows(f"WorkflowType = 'MigrateUnit' AND StartTime >= '{since}'"):
                if wf.id not in seen:
                    seen.add(wf.id)
                    delays.append(time.time() - wf.start_time.timestamp())
            calls.append(time.time() - t0)
            await asyncio.sleep(args.every)
        await starting.wait()
        print(f"listed {len(seen)} of {args.count}: delay from start p50 {pct(delays, .5):.0f} ms, "
              f"p95 {pct(delays, .95):.0f} ms, p99 {pct(delays, .99):.0f} ms, max {pct(delays, 1):.0f} ms; "
              f"list call p50 {pct(calls, .5):.0f} ms, max {pct(calls, 1):.0f} ms ({len(calls)} calls)")
    finally:
        if worker:
            worker.kill()
        server.kill()


asyncio.run(main())
