"""Who may ask: client and admin keys (the key ring, the runtime key directory), the per-address lockout and who the
client is behind a trusted proxy."""
