.PHONY: test demo bench lint lock
test:  ## set up .venv and run lint, types and tests
	./scripts/test
demo:  ## set up .venv and run `tailgate demo`
	./scripts/demo
lock:  ## regenerate the hashed lock files from pyproject.toml
	./scripts/lock
bench: ## the full benchmarks (minutes); numbers go to docs/benchmarks.md by hand
	.venv/bin/python benchmarks/bench_sim.py
