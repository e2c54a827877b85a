package sagaworker_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/agentsaga/agentsaga/sagaworker"
)

// CheckDeployment takes an empty version (unversioned) and a version
// Temporal takes (a build ID may hold dots: v0.1.0), and names the field
// and the rule of every other.
func TestCheckDeployment(t *testing.T) {
	v := func(name, build string) worker.WorkerDeploymentVersion {
		return worker.WorkerDeploymentVersion{DeploymentName: name, BuildID: build}
	}
	require.NoError(t, sagaworker.CheckDeployment(v("", "")))
	require.NoError(t, sagaworker.CheckDeployment(v("payments-agent", "v0.1.0+dirty")))
	for _, c := range []struct {
		v    worker.WorkerDeploymentVersion
		want string
	}{
		{v("payments", ""), "the build ID is empty"},
		{v("", "b1"), "the deployment name is empty"},
		{v("pay:ments", "b1"), "holds a '.' or ':'"},
		{v("payments", "b 1"), "the build ID \"b 1\" holds white space"},
		{v("payments", "__b"), `starts with "__"`},
		{v(strings.Repeat("p", 201), "b1"), "the deployment name is 201 bytes, at most 200"},
	} {
		require.ErrorContains(t, sagaworker.CheckDeployment(c.v), c.want, "%+v", c.v)
	}
}
