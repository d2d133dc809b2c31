"""The simulated provider (``tailgate mock``): engine model, presets, faults, ground truth (docs/simulator.md)."""
