module github.com/nora-breaker/nora-breaker/soak

go 1.26.0

replace github.com/nora-breaker/nora-breaker => ../

require github.com/nora-breaker/nora-breaker v0.0.0-00010101000000-000000000000
