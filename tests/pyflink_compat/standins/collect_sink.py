"""Stand-in for ``pyflink.datastream.tests.test_util``: a test sink that collects results.

PyFlink's ``DataStreamTestSinkFunction`` wraps a Java sink that keeps the records it receives and
hands them back as Java's ``toString`` (``get_results()``: a ``Types.ROW`` record reads
``+I[a, 1]``, a ``Types.TUPLE`` ``(a,1)``) or, for records without a declared type, as the
unpickled Python objects (``get_results(True)``; ``stringify`` gives their ``str``). Here the
sink is a Python SinkFunction: each subtask appends ``(arrival time, Java text, record)`` frames
to a file of its own under the sink's folder, and ``get_results`` reads every file back in arrival
order. The stream's declared type is bound when the sink is added (the harness's ``add_sink``
hook), as PyFlink converts a record to that type's Java object before its Java sink sees it.

This module is pickled by value into the job, so it imports only the standard library and
Millstream.
"""
import os
import struct
import tempfile
import time
import uuid

import cloudpickle

from millstream.common.watermark_strategy import TimestampAssigner
from millstream.datastream.functions import SinkFunction
from millstream.runtime.operators.record_text import record_formatter

_FRAME = "<I"  # a frame: its length, then the cloudpickled (arrival ns, Java text, record)


def _results_root():
    root = os.environ.get("MILLSTREAM_PYFLINK_COMPAT_RESULTS")
    if not root:
        root = tempfile.mkdtemp(prefix="pyflink-compat-results-")
        os.environ["MILLSTREAM_PYFLINK_COMPAT_RESULTS"] = root
    return root


class DataStreamTestSinkFunction(SinkFunction):
    """Collects a job's records for the test that added it (one folder per sink instance)."""

    def __init__(self):
        self._dir = os.path.join(_results_root(), uuid.uuid4().hex)
        os.makedirs(self._dir, exist_ok=True)
        self._type_info = None
        self._out = None
        self._text = None

    def for_stream(self, type_info):
        """This sink, bound to a stream of ``type_info`` (records keep their folder)."""
        bound = DataStreamTestSinkFunction.__new__(DataStreamTestSinkFunction)
        bound._dir, bound._type_info, bound._out, bound._text = self._dir, type_info, None, None
        return bound

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_out"] = None
        state["_text"] = None
        return state

    def invoke(self, value, context=None):
        if self._out is None:
            os.makedirs(self._dir, exist_ok=True)
            self._out = open(os.path.join(self._dir, uuid.uuid4().hex + ".rec"), "ab")
            self._text = record_formatter(self._type_info)
        blob = cloudpickle.dumps((time.time_ns(), self._text(value), value))
        self._out.write(struct.pack(_FRAME, len(blob)) + blob)
        self._out.flush()

    def close(self):
        if self._out is not None:
            self._out.close()
            self._out = None

    def _records(self):
        records = []
        if not os.path.isdir(self._dir):
            return records
        for name in os.listdir(self._dir):
            with open(os.path.join(self._dir, name), "rb") as f:
                data = f.read()
            at = 0
            while at + struct.calcsize(_FRAME) <= len(data):
                (size,) = struct.unpack_from(_FRAME, data, at)
                at += struct.calcsize(_FRAME)
                if at + size > len(data):
                    break  # a frame still being written
                records.append(cloudpickle.loads(data[at:at + size]))
                at += size
        records.sort(key=lambda r: r[0])
        return records

    def get_results(self, is_python_object: bool = False, stringify: bool = True):
        """The records received so far, then forgotten (as PyFlink's ``collectAndClear``)."""
        records = self._records()
        self.clear()
        if not is_python_object:
            return [text for _, text, _ in records]
        return [str(value) if stringify else value for _, _, value in records]

    def clear(self):
        # truncated, not removed: a writer still open in append mode goes on at the new end
        if os.path.isdir(self._dir):
            for name in os.listdir(self._dir):
                os.truncate(os.path.join(self._dir, name), 0)


class SecondColumnTimestampAssigner(TimestampAssigner):

    def extract_timestamp(self, value, record_timestamp) -> int:
        return int(value[1])
