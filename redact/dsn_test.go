package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentsaga/agentsaga/redact"
)

// Every DSN form prints without its password, parsed or not.
func TestDSNMasksEveryForm(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://postgres:PW@127.0.0.1:5432/db?sslmode=disable": "postgres://postgres:xxxxx@127.0.0.1:5432/db?sslmode=disable",
		"postgres://postgres:PW@[::1":                              "postgres://postgres:xxxxx@[::1",
		"postgres://u:p@ss:PW@[::1/db":                             "postgres://u:xxxxx@[::1/db",
		"postgres://u@h/db?password=PW&sslmode=disable":            "postgres://u@h/db?password=xxxxx&sslmode=disable",
		"host=db user=u password=PW dbname=x":                      "host=db user=u password=xxxxx dbname=x",
		"host=db password = PW":                                    "host=db password =xxxxx",
		"host=db password='P W' dbname=x":                          "host=db password=xxxxx dbname=x",
		`host=db password='it\'s PW' dbname=x`:                     "host=db password=xxxxx dbname=x",
		"host=db PASSWORD=PW":                                      "host=db PASSWORD=xxxxx",
		"host=db sslpassword=PW":                                   "host=db sslpassword=xxxxx",
		"sqlite:/var/lib/agentsaga/ledger.db":                      "sqlite:/var/lib/agentsaga/ledger.db",
		"postgres://u@h/db":                                        "postgres://u@h/db",
	} {
		got := redact.DSN(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "PW", in)
	}
}
