// Command printversion prints version.String(), for the package's test of
// what a built binary reports.
package main

import (
	"fmt"

	"github.com/agentsaga/agentsaga/internal/version"
)

func main() { fmt.Println(version.String()) }
