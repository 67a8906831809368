package group

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/walstream/walstream/kafka"
)

// Description is a fleet's group as its coordinator describes it: its
// state and members, each with the streams the last assignment gave it.
type Description struct {
	Group string
	// State is the coordinator's: Stable, PreparingRebalance,
	// CompletingRebalance, Empty or Dead (no such group).
	State string
	// Generation and Leader are the last assignment's, which every
	// member holds.
	Generation int32
	Leader     string
	Members    []DescribedMember
}

// DescribedMember is one member of a described group.
type DescribedMember struct {
	ID       string
	ClientID string
	// Host is where the coordinator sees the member's connection come
	// from; Name the host the member says it runs on.
	Host, Name string
	// Streams are those the assignment gives it; Configured those its
	// config has.
	Streams, Configured []string
}

// Owner is the member the description's assignment gives stream to.
func (d *Description) Owner(stream string) (DescribedMember, bool) {
	for _, m := range d.Members {
		if slices.Contains(m.Streams, stream) {
			return m, true
		}
	}
	return DescribedMember{}, false
}

// Describe asks the coordinator of group for its members and decodes
// their metadata and assignment. A group that does not exist is Dead,
// with no member.
func Describe(ctx context.Context, conn kafka.Settings, group string) (*Description, error) {
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Groups) != 1 {
		err = fmt.Errorf("%d groups described, want 1", len(resp.Groups))
	}
	if err == nil {
		err = kerr.ErrorForCode(resp.Groups[0].ErrorCode)
	}
	if errors.Is(err, kerr.GroupIDNotFound) {
		return &Description{Group: group, State: "Dead"}, nil // as Kafka describes a group it has not
	}
	if err != nil {
		if errors.Is(err, kerr.GroupAuthorizationFailed) {
			err = fmt.Errorf("%w: the principal needs the Describe ACL on group %s (Read implies it): %w", kafka.ErrAuthorization, group, err)
		}
		return nil, fmt.Errorf("describing the fleet's group %s: %w", group, err)
	}
	g := resp.Groups[0]
	d := &Description{Group: group, State: g.State}
	if g.ProtocolType != "" && g.ProtocolType != ProtocolType {
		return nil, fmt.Errorf("group %s is a group of protocol type %q, not a fleet of walstream processes (%q)", group, g.ProtocolType, ProtocolType)
	}
	for _, gm := range g.Members {
		m := DescribedMember{ID: gm.MemberID, ClientID: gm.ClientID, Host: strings.TrimPrefix(gm.ClientHost, "/")}
		if md, err := decodeMetadata(gm.ProtocolMetadata); err == nil {
			m.Name, m.Configured = md.Name, md.Streams
		}
		if a, err := decodeAssignment(gm.MemberAssignment); err == nil && len(gm.MemberAssignment) > 0 {
			a.Self = gm.MemberID
			m.Streams = a.Mine()
			if a.Generation > d.Generation {
				d.Generation, d.Leader = a.Generation, a.Leader
			}
		}
		d.Members = append(d.Members, m)
	}
	slices.SortFunc(d.Members, func(a, b DescribedMember) int { return strings.Compare(a.ID, b.ID) })
	return d, nil
}
