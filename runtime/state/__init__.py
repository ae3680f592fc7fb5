"""Keyed state backends: state tables laid out by key group."""
