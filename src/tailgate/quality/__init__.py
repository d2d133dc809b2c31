"""Answer quality: signals read from live answers (pure), and their Prometheus counter."""
