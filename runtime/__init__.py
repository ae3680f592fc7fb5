"""What every Millstream process shares, and the task engine.

Shared by client, JobManager and TaskManager: ``config`` (the option registry), ``rpc`` (gRPC
plumbing, the gateways), ``entrypoint`` (process entry), ``keygroups``, ``partitioners``,
``operator_factories`` (what a transformation records, cloudpickled into the JobGraph),
``output_tag``, ``state_machine`` (the one transition helper), ``clock``.

The task engine, run by a TaskManager inside a Spark executor: ``task`` (the operator chain and
the task's environment), ``operators`` (running operators, sources, sinks, the combiner) and
``state`` (the keyed state backend).
"""
