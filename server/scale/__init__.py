"""Scale-out (docs/scale-out.md): N stateless API workers queue validated pushes in PostgreSQL, one
aggregator applies them in order under a fenced lease and announces each new version over Redis."""
