//go:build tools

// Package tools keeps the dashboard-linter requirement in go.mod.
package tools

import _ "github.com/grafana/dashboard-linter"
