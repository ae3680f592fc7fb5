"""KafkaSink, its builder, KafkaRecordSerializationSchema and DeliveryGuarantee (PyFlink's names)."""
__all__: list[str] = []
