"""Workflows for the Temporal projection's tests (tests/api/temporal/).

    python3 worker.py run   --address HOST:PORT --task-queue Q
        runs a worker until killed;
    python3 worker.py start --address HOST:PORT --task-queue Q --workflow-id W --scenario S
        [--timeout SECONDS] [--retries N]
        starts workflow W (type MigrateUnit) and returns at once;
    python3 worker.py start-many --address HOST:PORT --prefix P --count N
        starts workflows P0..P(N-1) in `complete`, 50 at a time (benches/temporal.rs);
    python3 worker.py times --address HOST:PORT --prefix P --count N
        prints `temporal:<namespace>:<workflowId>:<runId>:<eventId> <event time in µs>`
        for every event of every run of those workflows.

Scenarios: `complete` (two activities, one returning costCents, then evidence
and MIGRATED), `dropped` (evidence and DROPPED with a reason), `retry` (the
first run fails, the workflow's retry policy runs it again, which completes),
`wait` (one activity, then waits an hour: to terminate, cancel or time out),
`continue` (continues as new once, then completes), `noevidence` (completes
without evidence).
"""

import argparse
import asyncio
import os
import sys
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

EVIDENCE = "https://ci.example.com/runs/1"


@activity.defn
async def migrate(unit: str) -> dict:
    return {"costCents": 120, "unit": unit}


@activity.defn
async def check(unit: str) -> str:
    return "green"


@workflow.defn(name="MigrateUnit")
class MigrateUnit:
    @workflow.run
    async def run(self, args: dict) -> dict:
        scenario = args["scenario"]
        opts = {"start_to_close_timeout": timedelta(seconds=30)}
        unit = workflow.info().workflow_id
        if scenario == "retry" and workflow.info().attempt == 1:
            raise ApplicationError("the first attempt breaks on purpose")
        if scenario == "continue" and args.get("round", 0) == 0:
            await workflow.execute_activity(check, unit, **opts)
            workflow.continue_as_new({"scenario": scenario, "round": 1})
        await workflow.execute_activity(migrate, unit, **opts)
        await workflow.execute_activity(check, unit, **opts)
        if scenario == "wait":
            await workflow.sleep(timedelta(hours=1))
        if scenario == "noevidence":
            return {"costCents": 5}
        if scenario == "dropped":
            return {"evidenceUrls": [EVIDENCE], "disposition": "DROPPED", "reason": "obsolete module"}
        return {"evidenceUrls": [EVIDENCE], "disposition": "MIGRATED", "reason": "tests green"}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["run", "start", "start-many", "times"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--task-queue", default="ledger-tests")
    parser.add_argument("--workflow-id")
    parser.add_argument("--scenario", default="complete")
    parser.add_argument("--timeout", type=float)
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument("--prefix", default="wf-")
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args()
    client = await Client.connect(args.address, namespace=args.namespace, identity="ledger-tests")
    if args.command == "run":
        worker = Worker(client, task_queue=args.task_queue, workflows=[MigrateUnit], activities=[migrate, check])
        print("worker running", flush=True)
        await worker.run()
        return
    if args.command == "start-many":
        ids = [f"{args.prefix}{i}" for i in range(args.count)]
        for i in range(0, len(ids), 50):
            await asyncio.gather(*[
                client.start_workflow("MigrateUnit", {"scenario": "complete"}, id=w, task_queue=args.task_queue)
                for w in ids[i:i + 50]
            ])
        return
    if args.command == "times":
        async def times(workflow_id: str) -> list:
            lines = []
            async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
                handle = client.get_workflow_handle(workflow_id, run_id=run.run_id)
                async for event in handle.fetch_history_events():
                    at = event.event_time.seconds * 1_000_000 + event.event_time.nanos // 1000
                    lines.append(f"temporal:{args.namespace}:{workflow_id}:{run.run_id}:{event.event_id} {at}")
            return lines
        ids = [f"{args.prefix}{i}" for i in range(args.count)]
        for i in range(0, len(ids), 50):
            for lines in await asyncio.gather(*[times(w) for w in ids[i:i + 50]]):
                print("\n".join(lines))
        return
    await client.start_workflow(
        "MigrateUnit",
        {"scenario": args.scenario},
        id=args.workflow_id,
        task_queue=args.task_queue,
        execution_timeout=timedelta(seconds=args.timeout) if args.timeout else None,
        retry_policy=RetryPolicy(maximum_attempts=args.retries, initial_interval=timedelta(milliseconds=200)),
    )


if __name__ == "__main__":
    asyncio.run(main())
    # The SDK's runtime can crash the interpreter's finalization after a
    # short-lived client; the workflow is started by then.
    sys.stdout.flush()
    os._exit(0)
