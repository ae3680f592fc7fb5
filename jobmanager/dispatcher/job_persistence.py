"""What the Dispatcher keeps of its jobs in HA storage (Flink's JobGraphStore, JobResultStore and
the job's global cleanup). Every method blocks (ZooKeeper, files): the Dispatcher calls them in a
thread, never on its loop.

A submitted job is stored as its whole ``SubmitJobRequest`` (the JobGraph with the artifacts: the
BlobServer is not HA storage) before the client hears it was accepted. A globally terminal job
(FINISHED, CANCELED, FAILED) gets a dirty result first, so no later leader ever runs it again;
then its job graph, checkpoint pointers and id counter are removed and the result is marked clean.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from millstream.jobmanager.checkpoint.driver import CheckpointServices
from millstream.jobmanager.checkpoint.settings import JobCheckpointing
from millstream.proto import cluster_pb2 as cpb
from millstream.runtime.ha.api import JobResultEntry, JobResultStatus
from millstream.runtime.ha.services import HighAvailabilityServices

log = logging.getLogger(__name__)


@dataclass
class JobPersistence:
    """The HA services seen from the Dispatcher (only under ``high-availability.type: zookeeper``)."""

    services: HighAvailabilityServices

    def put(self, request: cpb.SubmitJobRequest, job_id: bytes) -> None:
        self.services.job_graph_store().put_job_graph(job_id, request.SerializeToString())

    def checkpoint_services(self, job_id: bytes, checkpointing: JobCheckpointing) -> CheckpointServices:
        store = self.services.completed_checkpoint_store(Path(checkpointing.directory), job_id, checkpointing.num_retained)
        return CheckpointServices(store, self.services.checkpoint_id_counter(job_id))

    def globally_terminated(self, entry: JobResultEntry, checkpoints: Optional[CheckpointServices]) -> None:
        """The job ended for good: record it (dirty), clean up, mark the result clean."""
        results = self.services.job_result_store()
        if not results.has_job_result_entry(entry.job_id):
            results.create_dirty_result(entry)
        if checkpoints is not None:
            checkpoints.shutdown(globally_terminal=True)
        self.clean_up(entry.job_id)

    def clean_up(self, job_id: bytes) -> None:
        """Finish the cleanup of a globally terminal job (also one a former leader left dirty)."""
        self.services.job_graph_store().remove_job_graph(job_id)
        self.services.cleanup_job_data(job_id)
        results = self.services.job_result_store()
        if results.has_dirty_job_result_entry(job_id):
            results.mark_result_clean(job_id)
        log.info("job %s: HA data cleaned up", job_id.hex())

    def release(self, checkpoints: list[CheckpointServices]) -> None:
        """Leadership lost: release every lock (job graphs, checkpoints), delete nothing."""
        for services in checkpoints:
            services.shutdown(globally_terminal=False)
        self.services.job_graph_store().release_all()


def result_entry(job_id: bytes, job_name: str, status: str, failure: str, end_time_ms: int) -> JobResultEntry:
    return JobResultEntry(job_id, JobResultStatus(status), job_name, failure, end_time_ms)
