"""RASE fusion center: estimators, region merge, durable aggregates, precision broadcast."""
