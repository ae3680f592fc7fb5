"""What connectors share, at PyFlink's path ``pyflink.datastream.connectors.base``: the delivery
guarantee a sink is built with."""
from __future__ import annotations

from enum import Enum

__all__ = ["DeliveryGuarantee"]


class DeliveryGuarantee(Enum):
    """The delivery guarantee of a sink (Flink's ``DeliveryGuarantee``); a pipeline offers the
    weakest guarantee of its sources and sinks.

    ``EXACTLY_ONCE``: every record is delivered once, also across failovers (needs checkpointing).
    ``AT_LEAST_ONCE``: no record is lost; a failover may deliver some twice.
    ``NONE``: best effort: records may be lost or duplicated on a failure.
    """

    EXACTLY_ONCE = 0
    AT_LEAST_ONCE = 1
    NONE = 2
