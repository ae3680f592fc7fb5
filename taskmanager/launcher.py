"""The TaskManager process's entry point: Spark's JVM first, then the rest while it boots.

``python -m millstream.taskmanager.launcher`` (what ``millstream taskmanager`` and ``millstream
cluster start`` run) takes the same arguments as ``python -m millstream.taskmanager.taskmanager``, and ``--ready-file``.
It forks Spark's driver JVM right after reading the configuration, and only then imports the
TaskManager (gRPC, the task code: ~0.4 s) and starts its servers and high-availability services,
while the JVM boots (4-5 s). The TaskManager registers its slots once Spark's session runs and
its Python workers are warm (start_spark_host).

Light to import (no TaskManager, no task code): that is its point.
"""
from __future__ import annotations

import logging
from typing import Any

from millstream.runtime import config as cfg
from millstream.runtime.entrypoint.children import end_with_parent
from millstream.runtime.entrypoint.process import process_parser, run_process
from millstream.runtime.rpc.service import check_bindable
from millstream.taskmanager.spark.host_config import check_slots, start_spark_host, taskmanager_hosts

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> None:
    end_with_parent()  # a TaskManager started on demand or by run-application ends with its JobManager
    parser = process_parser("millstream taskmanager")
    parser.add_argument("--jobmanager", help="host:port of the JobManager without HA (default: jobmanager.rpc.address/port); "
                                              "with high-availability.type: zookeeper the leader is looked up instead")
    parser.add_argument("--ready-file", help="write the TaskManager's address here once its slots are registered")
    args = parser.parse_args(argv)

    def serve_configured(configuration: cfg.Configuration) -> Any:
        if args.jobmanager and configuration.get(cfg.HA_TYPE) != "NONE":
            log.warning("--jobmanager %s is ignored: with high-availability.type %s the TaskManager serves the "
                        "JobManager leader it finds in ZooKeeper", args.jobmanager, configuration.get(cfg.HA_TYPE))
        # What would fail the start anyway fails it before a JVM is forked for nothing.
        check_slots(configuration)
        check_bindable("TaskManager", taskmanager_hosts(configuration)[1], configuration.get(cfg.TASKMANAGER_RPC_PORT))
        spark = start_spark_host(configuration)
        from millstream.taskmanager.taskmanager import serve  # lazy: imported while the JVM boots (the point of this module)

        return serve(configuration, args.jobmanager, spark=spark, ready_file=args.ready_file)

    run_process("taskmanager", args, serve_configured)


if __name__ == "__main__":
    main()
