"""KafkaSource and its builder, offsets initializers and topic partitions (PyFlink's names)."""
__all__: list[str] = []
