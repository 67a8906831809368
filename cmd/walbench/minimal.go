package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"maps"
	"net"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kbin"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// minimalClient commits Kafka transactions of the same shape as kafka-txn's
// franz-go client, with none of a client's machinery: one blocking socket
// read and written by the calling goroutine on its own locked thread, no
// client goroutines, no batching, no compression, and no retries but of
// the answers that only say "not yet". Nobody should publish with it. It
// measures the least CPU a Go process on this machine spends on one
// transaction's round trips: the floor under any Kafka client, franz-go or
// one written for walstream, at walstream's transaction rate.
//
// It speaks to a single broker, and uses transaction version 2 (KIP-890:
// no AddPartitionsToTxn, each EndTxn bumps the epoch) when the broker has
// it, as franz-go does.
type minimalClient struct {
	fd   int
	rd   *bufio.Reader
	f    *kmsg.RequestFormatter
	corr int32
	out  []byte

	txnID string
	tv2   bool
	pid   int64
	epoch int16
	seq   map[minimalPartition]int32
	// partitions of each topic the transactions write.
	partitions map[string]int32
	// byKey places records as Kafka's default partitioner does, by the
	// murmur2 hash of the key, whatever the topic; keyed is the record it
	// is asked about.
	byKey kgo.TopicPartitioner
	keyed kgo.Record
}

type minimalPartition struct {
	topic     string
	partition int32
}

// dialMinimal connects to broker on the calling goroutine's thread, which
// it locks: the client must be used from that goroutine only.
func dialMinimal(ctx context.Context, broker, txnID string, topics ...string) (*minimalClient, error) {
	addr, err := net.ResolveTCPAddr("tcp4", broker)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", broker, err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("opening a socket: %w", err)
	}
	syscall.CloseOnExec(fd)
	sa := &syscall.SockaddrInet4{Port: addr.Port}
	copy(sa.Addr[:], addr.IP.To4())
	if err := syscall.Connect(fd, sa); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("connecting to %s: %w", broker, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("setting TCP_NODELAY: %w", err)
	}
	runtime.LockOSThread()
	c := &minimalClient{fd: fd, f: kmsg.NewRequestFormatter(kmsg.FormatterClientID("walbench-minimal")),
		txnID: txnID, seq: make(map[minimalPartition]int32), partitions: make(map[string]int32), byKey: kgo.StickyKeyPartitioner(nil).ForTopic("")}
	c.rd = bufio.NewReaderSize(c, 64<<10)
	if err := c.init(ctx, topics); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes the socket and unlocks the thread.
func (c *minimalClient) Close() {
	syscall.Close(c.fd)
	runtime.UnlockOSThread()
}

// Read is the socket's blocking read, under c.rd.
func (c *minimalClient) Read(b []byte) (int, error) {
	for {
		n, err := syscall.Read(c.fd, b)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c *minimalClient) write(b []byte) error {
	for len(b) > 0 {
		n, err := syscall.Write(c.fd, b)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// request sends req and returns its response.
func (c *minimalClient) request(req kmsg.Request) (kmsg.Response, error) {
	c.corr++
	c.out = c.f.AppendRequest(c.out[:0], req, c.corr)
	if err := c.write(c.out); err != nil {
		return nil, fmt.Errorf("sending %s: %w", kmsg.NameForKey(req.Key()), err)
	}
	var size [4]byte
	if _, err := io.ReadFull(c.rd, size[:]); err != nil {
		return nil, fmt.Errorf("reading the %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.rd, body); err != nil {
		return nil, fmt.Errorf("reading the %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	r := kbin.Reader{Src: body}
	if corr := r.Int32(); corr != c.corr {
		return nil, fmt.Errorf("%s response has correlation id %d, sent %d", kmsg.NameForKey(req.Key()), corr, c.corr)
	}
	resp := req.ResponseKind()
	// Flexible responses have a tagged-field header, except ApiVersions'.
	if resp.IsFlexible() && req.Key() != int16(kmsg.ApiVersions) {
		for range r.Uvarint() {
			r.Uvarint()
			r.Span(int(r.Uvarint()))
		}
	}
	if !r.Ok() {
		return nil, fmt.Errorf("%s response header is cut short, %d bytes", kmsg.NameForKey(req.Key()), len(body))
	}
	if err := resp.ReadFrom(r.Src); err != nil {
		return nil, fmt.Errorf("decoding the %s response: %w", kmsg.NameForKey(req.Key()), err)
	}
	return resp, nil
}

// init learns the broker's versions and the topics' partitions, and
// initializes the producer id.
func (c *minimalClient) init(ctx context.Context, topics []string) error {
	av := kmsg.NewPtrApiVersionsRequest()
	av.Version = 3
	av.ClientSoftwareName, av.ClientSoftwareVersion = "walbench", "0"
	resp, err := c.request(av)
	if err != nil {
		return err
	}
	avr := resp.(*kmsg.ApiVersionsResponse)
	if err := kerr.ErrorForCode(avr.ErrorCode); err != nil {
		return fmt.Errorf("ApiVersions: %w", err)
	}
	maxes := make(map[int16]int16)
	for _, k := range avr.ApiKeys {
		maxes[k.ApiKey] = k.MaxVersion
	}
	for _, f := range avr.FinalizedFeatures {
		if f.Name == "transaction.version" && f.MaxVersionLevel >= 2 {
			c.tv2 = maxes[int16(kmsg.Produce)] >= 12 && maxes[int16(kmsg.EndTxn)] >= 5
		}
	}

	md := kmsg.NewPtrMetadataRequest()
	md.Version = 9
	md.AllowAutoTopicCreation = true
	for _, t := range topics {
		mt := kmsg.NewMetadataRequestTopic()
		mt.Topic = kmsg.StringPtr(t)
		md.Topics = append(md.Topics, mt)
	}
	// A topic created by this request, or just before, may report no
	// leader at first.
	err = untilSettled(ctx, func() error {
		resp, err := c.request(md)
		if err != nil {
			return err
		}
		mr := resp.(*kmsg.MetadataResponse)
		if len(mr.Brokers) != 1 {
			return fmt.Errorf("the minimal client speaks to one broker, the cluster has %d", len(mr.Brokers))
		}
		var lerr error
		for _, t := range mr.Topics {
			lerr = errors.Join(lerr, kerr.ErrorForCode(t.ErrorCode))
			for _, p := range t.Partitions {
				if p.Leader < 0 && p.ErrorCode == 0 {
					p.ErrorCode = kerr.LeaderNotAvailable.Code
				}
				lerr = errors.Join(lerr, kerr.ErrorForCode(p.ErrorCode))
			}
			c.partitions[*t.Topic] = int32(len(t.Partitions))
		}
		if lerr != nil {
			return fmt.Errorf("metadata of %v: %w", topics, lerr)
		}
		return nil
	})
	if err != nil {
		return err
	}

	// On a new cluster the first FindCoordinator creates the transaction
	// state topic, and the coordinator answers only once it has loaded its
	// partition: the one broker is the coordinator, once it says so.
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.Version = 4
	fc.CoordinatorType = 1 // transaction
	fc.CoordinatorKeys = []string{c.txnID}
	err = untilSettled(ctx, func() error {
		resp, err := c.request(fc)
		if err != nil {
			return err
		}
		for _, co := range resp.(*kmsg.FindCoordinatorResponse).Coordinators {
			if err := kerr.ErrorForCode(co.ErrorCode); err != nil {
				return fmt.Errorf("FindCoordinator: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.Version = 3
	ip.TransactionalID = &c.txnID
	ip.TransactionTimeoutMillis = 60_000
	return untilSettled(ctx, func() error {
		resp, err := c.request(ip)
		if err != nil {
			return err
		}
		ipr := resp.(*kmsg.InitProducerIDResponse)
		if err := kerr.ErrorForCode(ipr.ErrorCode); err != nil {
			return fmt.Errorf("InitProducerID: %w", err)
		}
		c.pid, c.epoch = ipr.ProducerID, ipr.ProducerEpoch
		return nil
	})
}

// untilSettled calls fn until it returns nil or an error Kafka does not
// call retriable ("not yet": a leader or coordinator still being chosen
// or loaded), for up to 100 tries 20 ms apart.
func untilSettled(ctx context.Context, fn func() error) error {
	for try := 1; ; try++ {
		err := fn()
		if err == nil || try == 100 || !kerr.IsRetriable(err) {
			return err
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// commit commits records in one Kafka transaction, each in the partition
// Kafka's default partitioner picks for its key, and returns when it sent
// EndTxn.
func (c *minimalClient) commit(ctx context.Context, records []txnRecord) (time.Time, error) {
	batches := make(map[string]map[int32][]txnRecord) // by topic, then partition
	for _, r := range records {
		if batches[r.topic] == nil {
			batches[r.topic] = make(map[int32][]txnRecord)
		}
		c.keyed.Key = r.key
		p := int32(c.byKey.Partition(&c.keyed, int(max(1, c.partitions[r.topic]))))
		batches[r.topic][p] = append(batches[r.topic][p], r)
	}
	if !c.tv2 {
		if err := c.addPartitions(ctx, batches); err != nil {
			return time.Time{}, err
		}
	}
	if err := c.produce(ctx, batches); err != nil {
		return time.Time{}, err
	}
	et := kmsg.NewPtrEndTxnRequest()
	et.Version = 3
	if c.tv2 {
		et.Version = 5
	}
	et.TransactionalID, et.ProducerID, et.ProducerEpoch, et.Commit = c.txnID, c.pid, c.epoch, true
	committing := time.Now()
	resp, err := c.request(et)
	if err != nil {
		return committing, err
	}
	etr := resp.(*kmsg.EndTxnResponse)
	if err := kerr.ErrorForCode(etr.ErrorCode); err != nil {
		return committing, fmt.Errorf("EndTxn: %w", err)
	}
	if c.tv2 {
		// The epoch bumped, and sequences start again with it.
		c.pid, c.epoch = etr.ProducerID, etr.ProducerEpoch
		clear(c.seq)
	}
	return committing, nil
}

// produce writes the batches, which it empties. A partition answered "not
// yet" is sent again (notYet): under transaction version 2 the broker adds
// a partition to the transaction as it takes its first batch, and answers
// CONCURRENT_TRANSACTIONS while the coordinator still writes the markers of
// the previous one; a topic just created may have no leader yet.
func (c *minimalClient) produce(ctx context.Context, batches map[string]map[int32][]txnRecord) error {
	for try := 0; ; try++ {
		pr := kmsg.NewPtrProduceRequest()
		pr.Version = 9
		if c.tv2 {
			pr.Version = 12
		}
		pr.TransactionID = &c.txnID
		pr.Acks = -1
		pr.TimeoutMillis = 30_000
		for topic, parts := range batches {
			pt := kmsg.NewProduceRequestTopic()
			pt.Topic = topic
			for p, recs := range parts {
				pp := kmsg.NewProduceRequestTopicPartition()
				pp.Partition = p
				pp.Records = recordBatch(c.pid, c.epoch, c.seq[minimalPartition{topic, p}], recs)
				pt.Partitions = append(pt.Partitions, pp)
			}
			pr.Topics = append(pr.Topics, pt)
		}
		resp, err := c.request(pr)
		if err != nil {
			return err
		}
		var retry error
		for _, t := range resp.(*kmsg.ProduceResponse).Topics {
			for _, p := range t.Partitions {
				err := kerr.ErrorForCode(p.ErrorCode)
				switch {
				case err == nil:
					c.seq[minimalPartition{t.Topic, p.Partition}] += int32(len(batches[t.Topic][p.Partition]))
					delete(batches[t.Topic], p.Partition)
				case notYet(err) && try < 100:
					retry = err
				default:
					return fmt.Errorf("producing to %s[%d]: %w", t.Topic, p.Partition, err)
				}
			}
		}
		left := 0
		for topic, parts := range batches {
			if len(parts) == 0 {
				delete(batches, topic)
			}
			left += len(parts)
		}
		if left == 0 {
			return nil
		}
		if retry == nil {
			return fmt.Errorf("the Produce response left %d partitions unanswered", left)
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

// notYet reports whether err only says "not yet": CONCURRENT_TRANSACTIONS
// while the coordinator writes the markers of the previous transaction, or
// an error Kafka calls retriable, such as a leader still being chosen.
func notYet(err error) bool {
	return errors.Is(err, kerr.ConcurrentTransactions) || kerr.IsRetriable(err)
}

// addPartitions adds the batches' partitions to the transaction. Answers
// that say "not yet" (notYet) are retried.
func (c *minimalClient) addPartitions(ctx context.Context, batches map[string]map[int32][]txnRecord) error {
	ap := kmsg.NewPtrAddPartitionsToTxnRequest()
	ap.Version = 3
	ap.TransactionalID, ap.ProducerID, ap.ProducerEpoch = c.txnID, c.pid, c.epoch
	for topic, parts := range batches {
		t := kmsg.NewAddPartitionsToTxnRequestTopic()
		t.Topic = topic
		t.Partitions = slices.Collect(maps.Keys(parts))
		ap.Topics = append(ap.Topics, t)
	}
	for try := 0; ; try++ {
		resp, err := c.request(ap)
		if err != nil {
			return err
		}
		var aerr error
		for _, t := range resp.(*kmsg.AddPartitionsToTxnResponse).Topics {
			for _, p := range t.Partitions {
				aerr = cmp.Or(aerr, kerr.ErrorForCode(p.ErrorCode))
			}
		}
		if aerr == nil {
			return nil
		}
		if !notYet(aerr) || try == 100 {
			return fmt.Errorf("AddPartitionsToTxn: %w", aerr)
		}
		if err := sleepCtx(ctx, time.Millisecond); err != nil {
			return err
		}
	}
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordBatch encodes records as one uncompressed, transactional v2 record
// batch of producer pid at epoch, its first sequence seq.
func recordBatch(pid int64, epoch int16, seq int32, records []txnRecord) []byte {
	const transactional = 0x10
	now := time.Now().UnixMilli()
	b := make([]byte, 0, 61+len(records)*(len(records[0].value)+32))
	b = binary.BigEndian.AppendUint64(b, 0)          // first offset
	b = binary.BigEndian.AppendUint32(b, 0)          // length, below
	b = binary.BigEndian.AppendUint32(b, 0xffffffff) // partition leader epoch
	b = append(b, 2)                                 // magic
	b = binary.BigEndian.AppendUint32(b, 0)          // CRC, below
	b = binary.BigEndian.AppendUint16(b, transactional)
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)-1)) // last offset delta
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	b = binary.BigEndian.AppendUint64(b, uint64(now))
	b = binary.BigEndian.AppendUint64(b, uint64(pid))
	b = binary.BigEndian.AppendUint16(b, uint16(epoch))
	b = binary.BigEndian.AppendUint32(b, uint32(seq))
	b = binary.BigEndian.AppendUint32(b, uint32(len(records)))
	var rec []byte
	for i, r := range records {
		rec = append(rec[:0], 0)                 // attributes
		rec = binary.AppendVarint(rec, 0)        // timestamp delta
		rec = binary.AppendVarint(rec, int64(i)) // offset delta
		rec = binary.AppendVarint(rec, int64(len(r.key)))
		rec = append(rec, r.key...)
		rec = binary.AppendVarint(rec, int64(len(r.value)))
		rec = append(rec, r.value...)
		rec = binary.AppendVarint(rec, 0) // headers
		b = binary.AppendVarint(b, int64(len(rec)))
		b = append(b, rec...)
	}
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}
