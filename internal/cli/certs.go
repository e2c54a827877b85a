package cli

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentsaga/agentsaga/internal/tlscerts"
)

// ownerFlags is the repeatable --owner NAME=UID[:GID].
type ownerFlags map[string][2]int

func (o ownerFlags) String() string { return "" }

func (o ownerFlags) Set(v string) error {
	name, ids, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return fmt.Errorf("want NAME=UID[:GID], got %q", v)
	}
	u, g, hasG := strings.Cut(ids, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return fmt.Errorf("uid %q in %q is not a number", u, v)
	}
	gid := uid
	if hasG {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return fmt.Errorf("gid %q in %q is not a number", g, v)
		}
	}
	o[name] = [2]int{uid, gid}
	return nil
}

// clusterCerts makes the CA and the certificates of docker-compose.yml's
// mutual TLS (tlscerts.Compose), kept when they exist.
func clusterCerts(args []string, out io.Writer, asJSON bool) error {
	fs := flag.NewFlagSet("cluster certs", flag.ContinueOnError)
	dir := fs.String("out", "", "directory the files are written to (required): ca.pem/ca.key and NAME.pem/NAME.key for "+names())
	validity := fs.Duration("validity", tlscerts.DefaultValidity, fmt.Sprintf("how long each certificate is valid (%v to %v; the CA: %v)", tlscerts.MinValidity, tlscerts.MaxValidity, tlscerts.CAValidity))
	renew := fs.Bool("renew", false, "reissue every certificate from the existing CA (without it existing files are kept)")
	owners := ownerFlags{}
	fs.Var(owners, "owner", "NAME=UID[:GID]: give NAME's key to the user its container runs as (repeatable; needs root)")
	fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args, out)
	if err != nil {
		return err
	}
	if len(pos) > 0 || *dir == "" {
		return usageErr("cluster certs: usage: cluster certs --out DIR [--validity %v] [--renew] [--owner NAME=UID[:GID]]", tlscerts.DefaultValidity)
	}
	rows, err := tlscerts.Generate(*dir, tlscerts.Compose, tlscerts.Options{Validity: *validity, Renew: *renew, Owners: owners})
	if err != nil {
		if strings.Contains(err.Error(), "validity") || strings.Contains(err.Error(), "owner given") {
			return usageErr("cluster certs: --validity/--owner: %v", err)
		}
		return fmt.Errorf("cluster certs: %w", err)
	}
	type row struct {
		Name     string    `json:"name"`
		Action   string    `json:"action"`
		NotAfter time.Time `json:"not_after"`
	}
	var rs []row
	for _, r := range rows {
		rs = append(rs, row{r.Name, r.Action, r.NotAfter.UTC()})
	}
	if asJSON {
		return printJSON(out, rs)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tDONE\tVALID UNTIL")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.Name, r.Action, r.NotAfter.Format(time.DateOnly))
	}
	_ = tw.Flush()
	fmt.Fprintf(out, "in %s: keys mode 0600; keep ca.key off the running hosts once the certificates are made (--renew needs it back)\n", safe(*dir))
	return nil
}

func names() string {
	var n []string
	for _, id := range tlscerts.Compose {
		n = append(n, id.Name)
	}
	return strings.Join(n, ", ")
}
