"""The deterministic simulator: numpy and the standard library only, never torch."""
