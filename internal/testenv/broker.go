package testenv

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// StartBroker starts an in-process kfake broker on loopback with topic
// auto-creation, closed at the end of the test.
func StartBroker(t testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(FreePort(t)),
		kfake.AllowAutoTopicCreation(),
		kfake.DefaultNumPartitions(3),
	}, opts...)...)
	if err != nil {
		unavailable(t, "starting kfake broker: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}
