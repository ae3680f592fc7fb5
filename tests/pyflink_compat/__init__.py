"""PyFlink's own DataStream tests, run against Millstream.

PyFlink's test modules (``flink-python/pyflink/datastream/tests/test_*.py`` in the Flink
repository) are not on PyPI: neither the ``apache-flink`` wheel nor its sdist ships them. Point
``MILLSTREAM_PYFLINK_TESTS`` at a checkout's ``flink-python/pyflink`` directory and run
``python -m tests.pyflink_compat``. The run happens in a child process whose imports of
``pyflink.*`` resolve to Millstream (:mod:`.alias`), with Millstream's own stand-ins for the
Java-backed test utilities (:mod:`.standins`); every test ends as passed, failed, or needing a Java
object (:mod:`.classify`), which is reported as a skip with that reason.
"""
