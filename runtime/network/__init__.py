"""The data plane between tasks: result partitions, input gates, credit-based flow control."""
