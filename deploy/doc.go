// Package deploy holds the checks for the production deployment files at the
// repository root: docker-compose.yml (Temporal on PostgreSQL, the Temporal Web
// UI, the worker, and the sandbox under the "sandbox" profile) and the
// Dockerfile that builds the worker and starter image.
//
// No Docker engine runs where the tests run, so the tests load the compose
// file with compose-spec/compose-go (the loader Docker Compose itself uses:
// schema validation, interpolation, profiles) and check that services, ports
// and environment agree with what the worker reads (package config).
package deploy
