"""The gateway's side of the fleet: what replicas share through the state layer (rpm, pacing shares, pauses,
breakers)."""
