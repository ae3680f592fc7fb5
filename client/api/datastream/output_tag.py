"""PyFlink's ``pyflink.datastream.output_tag`` path."""
from millstream.runtime.output_tag import OutputTag

__all__ = ["OutputTag"]
