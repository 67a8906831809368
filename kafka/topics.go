package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The checkpoint topic must outlive any one broker: a lost checkpoint makes
// the next instance republish from the slot, which is duplicates. These are
// the settings walstream creates it with and checks an existing one against.
const (
	// CheckpointReplicas is the replication factor wanted, capped at the
	// number of brokers.
	CheckpointReplicas = 3
	// CheckpointMinInSync is min.insync.replicas once the topic has
	// CheckpointReplicas replicas: a commit then survives one broker lost,
	// and one broker may be down (a rolling restart) without stopping the
	// stream. With fewer replicas it is left at the broker's default, since
	// 2 of 2 would stop the stream whenever either broker restarts.
	CheckpointMinInSync = 2
)

// TopicState is what the cluster says about a topic, and how it falls short
// of what walstream wants for it.
type TopicState struct {
	Topic string
	// Exists is false when the topic is missing; the other fields are then
	// zero.
	Exists bool
	// Brokers is the number of brokers in the cluster's metadata.
	Brokers           int
	Partitions        int
	ReplicationFactor int // of its first partition
	// MinInSync is min.insync.replicas, -1 when it could not be read.
	MinInSync int
	// CleanupPolicy is cleanup.policy, empty when it could not be read.
	CleanupPolicy string
	// Weaker lists, in words, each way the topic is weaker than wanted.
	Weaker []string
}

// wantCheckpoint returns the replication factor and min.insync.replicas
// the checkpoint topic should have on a cluster of n brokers; minISR 0
// means the broker's default.
func wantCheckpoint(brokers int) (replicas, minISR int) {
	replicas = max(1, min(CheckpointReplicas, brokers))
	if replicas >= CheckpointReplicas {
		minISR = CheckpointMinInSync
	}
	return replicas, minISR
}

// CheckCheckpointTopic describes the checkpoint topic and says how it is
// weaker than walstream would create it, changing nothing: for status and
// setup checks.
func CheckCheckpointTopic(ctx context.Context, conn Settings, topic string) (TopicState, error) {
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return TopicState{Topic: topic}, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	return describeCheckpointTopic(ctx, cl, topic)
}

// EnsureCheckpointTopic creates the checkpoint topic with cl when it is
// missing, compacted, with min(3, brokers) replicas and
// min.insync.replicas 2 on three brokers or more, and logs a warning
// naming the topic and its actual settings when an existing one is weaker.
// Only a failure to create a missing topic is an error: a topic that
// cannot be described is logged. A TopicCreation group that takes the
// topic (tc, when not nil) sets its replication factor and configs, except
// that it stays one compacted partition: one checkpoint per key, kept for
// ever.
func EnsureCheckpointTopic(ctx context.Context, cl *kgo.Client, topic string, tc *TopicCreation, log *slog.Logger) (TopicState, error) {
	st, err := describeCheckpointTopic(ctx, cl, topic)
	if err != nil {
		return st, err
	}
	if !st.Exists {
		replicas, minISR := wantCheckpoint(st.Brokers)
		configs := map[string]*string{}
		if minISR > 0 {
			configs["min.insync.replicas"] = kadm.StringPtr(strconv.Itoa(minISR))
		}
		if tc != nil {
			g := tc.For(topic)
			if g.ReplicationFactor > 0 {
				replicas = int(g.ReplicationFactor)
			}
			for k, v := range g.Configs {
				configs[k] = kadm.StringPtr(v)
			}
		}
		configs["cleanup.policy"] = kadm.StringPtr("compact")
		resp, err := kadm.NewClient(cl).CreateTopic(ctx, 1, int16(replicas), configs, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return st, &TopicError{Topic: topic, Err: fmt.Errorf("creating the checkpoint topic with %d replicas (it needs the Create ACL, or create it beforehand): %w", replicas, err)}
		}
		if err == nil {
			isr := "broker default"
			if minISR > 0 {
				isr = strconv.Itoa(minISR)
			}
			log.Info("created checkpoint topic", "topic", topic, "replication_factor", replicas,
				"min_insync_replicas", isr, "cleanup_policy", "compact", "brokers", st.Brokers)
		}
		// Created here or by another instance at the same time: describe
		// what is there now.
		if st, err = describeCheckpointTopic(ctx, cl, topic); err != nil {
			return st, err
		}
	}
	if len(st.Weaker) > 0 {
		log.Warn("checkpoint topic is weaker than walstream would create it: losing a broker may lose the checkpoint, and walstream would then republish from the slot",
			"topic", topic, "weaker", strings.Join(st.Weaker, "; "), "replication_factor", st.ReplicationFactor,
			"min_insync_replicas", st.MinInSync, "cleanup_policy", st.CleanupPolicy, "brokers", st.Brokers)
	}
	return st, nil
}

// describeCheckpointTopic reads the topic's metadata and configs and judges
// them. A missing topic is no error; configs that cannot be read (no
// DescribeConfigs permission) are reported in Weaker, not as an error.
func describeCheckpointTopic(ctx context.Context, cl *kgo.Client, topic string) (TopicState, error) {
	st := TopicState{Topic: topic, MinInSync: -1}
	md, err := topicMetadata(ctx, cl, topic)
	if err != nil {
		return st, fmt.Errorf("reading metadata of checkpoint topic %s: %w", topic, err)
	}
	st.Brokers = len(md.brokers)
	if !md.exists {
		return st, nil
	}
	st.Exists, st.Partitions, st.ReplicationFactor = true, md.partitions, md.replicas
	replicas, minISR := wantCheckpoint(st.Brokers)
	if st.ReplicationFactor < replicas {
		st.Weaker = append(st.Weaker, fmt.Sprintf("replication factor %d, want %d on %d brokers", st.ReplicationFactor, replicas, st.Brokers))
	}
	configs, err := topicConfigs(ctx, cl, topic)
	if err != nil {
		st.Weaker = append(st.Weaker, fmt.Sprintf("its configs cannot be read (the DescribeConfigs ACL on topic %s): %v", topic, err))
		return st, nil
	}
	st.CleanupPolicy = configs["cleanup.policy"]
	if n, err := strconv.Atoi(configs["min.insync.replicas"]); err == nil {
		st.MinInSync = n
	}
	// compact,delete lets retention delete the last checkpoint of a stream
	// that was stopped for longer than retention.ms.
	if policies := strings.Split(st.CleanupPolicy, ","); !slices.Equal(policies, []string{"compact"}) {
		st.Weaker = append(st.Weaker, fmt.Sprintf("cleanup.policy %q, want compact", st.CleanupPolicy))
	}
	if st.MinInSync >= 0 && st.MinInSync < minISR {
		st.Weaker = append(st.Weaker, fmt.Sprintf("min.insync.replicas %d, want %d", st.MinInSync, minISR))
	}
	if st.MinInSync > st.ReplicationFactor {
		// Apache Kafka (3.9 and 4.x alike) caps it at the replica count:
		// every replica must be in sync, and one that is not stops commits.
		st.Weaker = append(st.Weaker, fmt.Sprintf("min.insync.replicas %d is over the replication factor %d: Kafka caps it there, so every commit waits for all %d replicas, and one out of sync stops the stream",
			st.MinInSync, st.ReplicationFactor, st.ReplicationFactor))
	}
	return st, nil
}

// metadata is what a metadata request says about one topic.
type metadata struct {
	brokers    []kmsg.MetadataResponseBroker
	exists     bool
	partitions int
	replicas   int // of partition 0
}

// topicMetadata asks a broker about topic, bypassing the client's metadata
// cache (kadm's Metadata may answer from it for seconds after a topic was
// created). It never asks the broker to create the topic.
func topicMetadata(ctx context.Context, cl *kgo.Client, topic string) (metadata, error) {
	return topicMetadataAuto(ctx, cl, topic, false)
}

// topicMetadataAuto is topicMetadata that may ask the broker to create a
// missing topic, as a producer's metadata request does: a topic being
// created (LEADER_NOT_AVAILABLE) exists.
func topicMetadataAuto(ctx context.Context, cl *kgo.Client, topic string, autoCreate bool) (metadata, error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = autoCreate
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return metadata{}, err
	}
	md := metadata{brokers: resp.Brokers}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			return md, nil
		case autoCreate && errors.Is(err, kerr.LeaderNotAvailable):
			md.exists = true
			return md, nil
		case errors.Is(err, kerr.TopicAuthorizationFailed):
			return md, fmt.Errorf("%w: describing it needs the Describe (or Write) ACL on the topic: %w", ErrAuthorization, err)
		case err != nil:
			return md, err
		}
		md.exists, md.partitions = true, len(t.Partitions)
		for _, p := range t.Partitions {
			if p.Partition == 0 {
				md.replicas = len(p.Replicas)
			}
		}
	}
	return md, nil
}

// TopicCreation says how walstream creates the outbox and dead-letter
// topics it writes to, in Kafka Connect's topic.creation.* vocabulary
// (KIP-158), which Debezium uses. Without it walstream relies on the
// broker's auto.create.topics.enable.
type TopicCreation struct {
	// Default applies to every topic no group includes.
	Default TopicGroup
	// Groups are tried in order; the first whose Include matches a topic
	// and whose Exclude does not decides its settings.
	Groups []TopicGroup
}

// TopicGroup is one topic.creation group.
type TopicGroup struct {
	Name string
	// Include and Exclude are anchored regexes on the topic name; Exclude
	// wins. The default group has neither.
	Include, Exclude []*regexp.Regexp
	// Partitions and ReplicationFactor are -1 for the broker's default.
	Partitions        int32
	ReplicationFactor int16
	// Configs are topic configs (cleanup.policy, retention.ms, ...).
	Configs map[string]string
}

const topicCreationPrefix = "topic.creation."

// ParseTopicCreation reads Kafka Connect topic.creation.* properties, with
// or without the "topic.creation." prefix:
//
//	default.replication.factor=3
//	default.partitions=6
//	default.compression.type=lz4
//	groups=orders
//	orders.include=outbox\.event\.Order.*
//	orders.partitions=12
//	orders.cleanup.policy=compact,delete
//
// Custom groups take replication factor and partitions from the default
// group when they do not set them, but not its topic configs, as in Kafka
// Connect. Missing default.replication.factor or default.partitions mean
// the broker's defaults (-1); Kafka Connect requires them.
func ParseTopicCreation(props map[string]string) (*TopicCreation, error) {
	tc := &TopicCreation{Default: TopicGroup{Name: "default", Partitions: -1, ReplicationFactor: -1, Configs: map[string]string{}}}
	groups := map[string]*TopicGroup{}
	var order []string
	if v, ok := lookupProp(props, "groups"); ok {
		for _, g := range strings.Split(v, ",") {
			if g = strings.TrimSpace(g); g == "" {
				continue
			}
			if g == "default" || groups[g] != nil {
				return nil, fmt.Errorf("%sgroups: group %q is listed twice or is the default group", topicCreationPrefix, g)
			}
			groups[g] = &TopicGroup{Name: g, Partitions: -2, ReplicationFactor: -2, Configs: map[string]string{}}
			order = append(order, g)
		}
	}
	var errs []error
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		k := strings.TrimPrefix(key, topicCreationPrefix)
		v := strings.TrimSpace(props[key])
		if k == "groups" || k == "enable" {
			continue
		}
		name, setting, ok := strings.Cut(k, ".")
		g := groups[name]
		if name == "default" {
			g = &tc.Default
		}
		if !ok || g == nil {
			errs = append(errs, fmt.Errorf("%s%s: %q is not the default group nor one listed in %sgroups", topicCreationPrefix, k, name, topicCreationPrefix))
			continue
		}
		if err := g.set(setting, v); err != nil {
			errs = append(errs, fmt.Errorf("%s%s: %w", topicCreationPrefix, k, err))
		}
	}
	for _, name := range order {
		g := groups[name]
		if len(g.Include) == 0 {
			errs = append(errs, fmt.Errorf("%s%s.include: is required for a custom group", topicCreationPrefix, name))
		}
		if g.Partitions == -2 {
			g.Partitions = tc.Default.Partitions
		}
		if g.ReplicationFactor == -2 {
			g.ReplicationFactor = tc.Default.ReplicationFactor
		}
		tc.Groups = append(tc.Groups, *g)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return tc, nil
}

// ParseTopicCreationText reads topic.creation.* properties written as
// name=value, one a line or separated by semicolons (values such as regex
// lists and cleanup.policy hold commas); # starts a comment line. Empty
// text is nil: rely on the broker's auto-creation.
func ParseTopicCreationText(s string) (*TopicCreation, error) {
	props := make(map[string]string)
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ';' }) {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=value", line)
		}
		k = strings.TrimSpace(k)
		if _, dup := props[k]; dup {
			return nil, fmt.Errorf("%s is set twice", k)
		}
		props[k] = strings.TrimSpace(v)
	}
	if len(props) == 0 {
		return nil, nil
	}
	return ParseTopicCreation(props)
}

func lookupProp(props map[string]string, k string) (string, bool) {
	if v, ok := props[topicCreationPrefix+k]; ok {
		return v, true
	}
	v, ok := props[k]
	return v, ok
}

func (g *TopicGroup) set(setting, v string) error {
	switch setting {
	case "include", "exclude":
		if g.Name == "default" {
			return fmt.Errorf("the default group takes every topic no other group includes")
		}
		var res []*regexp.Regexp
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			re, err := regexp.Compile("^(?:" + s + ")$")
			if err != nil {
				return fmt.Errorf("regex %q: %w", s, err)
			}
			res = append(res, re)
		}
		if setting == "include" {
			g.Include = res
		} else {
			g.Exclude = res
		}
	case "partitions":
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n == 0 || n < -1 {
			return fmt.Errorf("%q is not a positive number of partitions or -1 (the broker's default)", v)
		}
		g.Partitions = int32(n)
	case "replication.factor":
		n, err := strconv.ParseInt(v, 10, 16)
		if err != nil || n == 0 || n < -1 {
			return fmt.Errorf("%q is not a positive replication factor or -1 (the broker's default)", v)
		}
		g.ReplicationFactor = int16(n)
	default:
		if setting == "" {
			return fmt.Errorf("no topic config named")
		}
		g.Configs[setting] = v
	}
	return nil
}

// SetsConfigs reports whether any group sets topic configs, which
// walstream then compares with those of existing topics.
func (tc *TopicCreation) SetsConfigs() bool {
	if tc == nil {
		return false
	}
	n := len(tc.Default.Configs)
	for _, g := range tc.Groups {
		n += len(g.Configs)
	}
	return n > 0
}

// For returns the group that decides how topic is created.
func (tc *TopicCreation) For(topic string) *TopicGroup {
	matches := func(res []*regexp.Regexp) bool {
		return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(topic) })
	}
	for i := range tc.Groups {
		if g := &tc.Groups[i]; matches(g.Include) && !matches(g.Exclude) {
			return g
		}
	}
	return &tc.Default
}

// ErrTopicMissing means a record's topic does not exist and the cluster
// did not create it when asked for its metadata: auto-creation is off, or
// walstream may not create it.
var ErrTopicMissing = errors.New("the topic does not exist and the cluster did not create it " +
	"(auto.create.topics.enable is off, or walstream's principal may not Create it)")

// TopicError is a topic walstream cannot write to as it is.
type TopicError struct {
	Topic string
	Err   error
}

func (e *TopicError) Error() string { return fmt.Sprintf("topic %s: %v", e.Topic, e.Err) }
func (e *TopicError) Unwrap() error { return e.Err }

// TopicCreator makes sure each topic walstream is about to write to
// exists before its first record, once per topic per producer. With
// TopicCreation it creates a missing topic, and warns when an existing one
// has other settings than its group's; without, it asks the broker for the
// topic's metadata as a producer would, which auto-creates it where the
// cluster does, and a topic still missing is an error (ErrTopicMissing),
// rather than a transaction that times out.
type TopicCreator struct {
	cl   *kgo.Client
	tc   *TopicCreation // nil: the broker's auto-creation
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]bool // topics known to exist
}

// NewTopicCreator creates topics with cl as tc says (nil: the broker's
// auto-creation).
func NewTopicCreator(cl *kgo.Client, tc *TopicCreation, log *slog.Logger) *TopicCreator {
	return &TopicCreator{cl: cl, tc: tc, log: log, seen: make(map[string]bool)}
}

// How long a topic the broker may be auto-creating is waited for.
const (
	autoCreateWait = 3 * time.Second
	autoCreatePoll = 200 * time.Millisecond
)

// Ensure makes sure topic exists, creating it with TopicCreation.
func (c *TopicCreator) Ensure(ctx context.Context, topic string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[topic] {
		return nil
	}
	// Look first: walstream may be allowed to write to a topic and not to
	// create one.
	md, err := topicMetadataAuto(ctx, c.cl, topic, c.tc == nil)
	// Kafka 4.x in KRaft mode answers the request that makes it create a
	// topic with UNKNOWN_TOPIC_OR_PARTITION, creating it meanwhile: ask
	// again for a while before calling it missing.
	for wait := autoCreateWait; err == nil && !md.exists && c.tc == nil && wait > 0; wait -= autoCreatePoll {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(autoCreatePoll):
		}
		md, err = topicMetadataAuto(ctx, c.cl, topic, true)
	}
	if err != nil {
		return &TopicError{Topic: topic, Err: fmt.Errorf("reading its metadata: %w", err)}
	}
	switch {
	case md.exists && c.tc != nil:
		c.compare(ctx, topic, md)
	case md.exists:
	case c.tc == nil:
		return &TopicError{Topic: topic, Err: ErrTopicMissing}
	default:
		if err := c.create(ctx, topic); err != nil {
			return err
		}
	}
	c.seen[topic] = true
	return nil
}

func (c *TopicCreator) create(ctx context.Context, topic string) error {
	g := c.tc.For(topic)
	configs := make(map[string]*string, len(g.Configs))
	for k, v := range g.Configs {
		configs[k] = kadm.StringPtr(v)
	}
	resp, err := kadm.NewClient(c.cl).CreateTopic(ctx, g.Partitions, g.ReplicationFactor, configs, topic)
	if err == nil {
		err = resp.Err
	}
	switch {
	case errors.Is(err, kerr.TopicAlreadyExists):
		c.log.Info("topic exists: created at the same time by another client", "topic", topic)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed):
		return &TopicError{Topic: topic, Err: fmt.Errorf("%w: creating it (topic.creation group %s) needs the Create ACL on the topic: %w", ErrAuthorization, g.Name, err)}
	case err != nil:
		return &TopicError{Topic: topic, Err: fmt.Errorf("creating it (topic.creation group %s): %w", g.Name, err)}
	default:
		c.log.Info("created topic", "topic", topic, "topic_creation_group", g.Name,
			"partitions", resp.NumPartitions, "replication_factor", resp.ReplicationFactor)
	}
	return nil
}

// compare warns when an existing topic differs from what its group would
// create: walstream never alters a topic, but an operator may want to.
func (c *TopicCreator) compare(ctx context.Context, topic string, md metadata) {
	g := c.tc.For(topic)
	var diff []string
	if g.Partitions > 0 && int(g.Partitions) != md.partitions {
		diff = append(diff, fmt.Sprintf("%d partitions, the group says %d", md.partitions, g.Partitions))
	}
	if g.ReplicationFactor > 0 && int(g.ReplicationFactor) != md.replicas {
		diff = append(diff, fmt.Sprintf("replication factor %d, the group says %d", md.replicas, g.ReplicationFactor))
	}
	if len(g.Configs) > 0 {
		have, err := topicConfigs(ctx, c.cl, topic)
		if err != nil {
			diff = append(diff, fmt.Sprintf("its configs cannot be read to compare (the DescribeConfigs ACL on topic %s): %v", topic, err))
		}
		for _, k := range slices.Sorted(maps.Keys(g.Configs)) {
			if v, ok := have[k]; err == nil && (!ok || v != g.Configs[k]) {
				diff = append(diff, fmt.Sprintf("%s %q, the group says %q", k, v, g.Configs[k]))
			}
		}
	}
	if len(diff) > 0 {
		c.log.Warn("topic exists with other settings than its topic.creation group's: walstream leaves it as it is",
			"topic", topic, "topic_creation_group", g.Name, "differences", strings.Join(diff, "; "))
	}
}

// topicConfigs reads a topic's configs, by name.
func topicConfigs(ctx context.Context, cl *kgo.Client, topic string) (map[string]string, error) {
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	var rc kadm.ResourceConfig
	if err == nil {
		rc, err = rcs.On(topic, nil)
	}
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(rc.Configs))
	for _, c := range rc.Configs {
		out[c.Key] = c.MaybeValue()
	}
	return out, nil
}

// MissingTopics returns those of topics the cluster does not have, asking
// for their metadata without creating them.
func MissingTopics(ctx context.Context, conn Settings, topics []string) ([]string, error) {
	cl, err := kgo.NewClient(conn.Opts()...)
	if err != nil {
		return nil, fmt.Errorf("creating Kafka client: %w", err)
	}
	defer cl.Close()
	var missing []string
	for _, t := range topics {
		md, err := topicMetadata(ctx, cl, t)
		if err != nil {
			return missing, &TopicError{Topic: t, Err: fmt.Errorf("reading its metadata: %w", err)}
		}
		if !md.exists {
			missing = append(missing, t)
		}
	}
	return missing, nil
}
