package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// recvCommand is the hidden subcommand that drains a slot and discards
// what it receives, as pg_recvlogical does, but with the Go client
// walstream uses (pgconn and pglogrepl): the cost of receiving pgoutput in
// Go before any decoding or Kafka.
const recvCommand = "recv"

// slotGoRecv is the third slot of a drain run, for recv.
const slotGoRecv = "walbench_gorecv"

// runRecv streams a slot from its confirmed position until a message at or
// past -endpos, then confirms -endpos and exits, like pg_recvlogical
// --endpos. It prints the number of messages and INSERTs received.
func runRecv(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("walbench recv", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("pg-url", "", "Postgres URL")
	slot := fs.String("slot", slotGoRecv, "pgoutput slot to drain")
	pub := fs.String("publication", benchPublication, "publication")
	endpos := fs.String("endpos", "", "stop at the first message at or past this LSN")
	status := fs.Duration("status-interval", 10*time.Second, "standby status interval (pg_recvlogical's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	end, err := parseLSN(*endpos)
	if err != nil {
		return fmt.Errorf("-endpos: %w", err)
	}
	cfg, err := pgconn.ParseConfig(*url)
	if err != nil {
		return fmt.Errorf("-pg-url: %w", err)
	}
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("opening a replication connection: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pglogrepl.StartReplication(ctx, conn, *slot, 0, pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", fmt.Sprintf("publication_names '%s'", *pub)},
	})
	if err != nil {
		return fmt.Errorf("starting replication on slot %s: %w", *slot, err)
	}
	var received pglogrepl.LSN
	var messages, inserts int64
	confirm := func(lsn pglogrepl.LSN) error {
		if lsn == 0 {
			return nil
		}
		err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: lsn, WALFlushPosition: lsn, WALApplyPosition: lsn})
		if err != nil {
			return fmt.Errorf("sending standby status at %s: %w", lsn, err)
		}
		return nil
	}
	next := time.Now().Add(*status)
	for {
		if time.Now().After(next) {
			if err := confirm(received); err != nil {
				return err
			}
			next = time.Now().Add(*status)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil && pgconn.Timeout(err) {
				continue
			}
			return fmt.Errorf("receiving from slot %s: %w", *slot, err)
		}
		var data []byte
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			data = m.Data
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("slot %s: %w", *slot, pgconn.ErrorResponseToPgError(m))
		default:
			return fmt.Errorf("slot %s: unexpected message %T", *slot, msg)
		}
		if len(data) == 0 {
			return errors.New("empty CopyData message")
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("parsing keepalive: %w", err)
			}
			if ka.ServerWALEnd >= end {
				return finishRecv(confirm, end, messages, inserts, stdout)
			}
			if ka.ReplyRequested {
				if err := confirm(received); err != nil {
					return err
				}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("parsing XLogData: %w", err)
			}
			if x.WALStart > end {
				return finishRecv(confirm, end, messages, inserts, stdout)
			}
			messages++
			if len(x.WALData) > 0 && x.WALData[0] == byte(pglogrepl.MessageTypeInsert) {
				inserts++
			}
			received = x.WALStart
			if x.WALStart == end {
				return finishRecv(confirm, end, messages, inserts, stdout)
			}
		}
	}
}

// finishRecv confirms end, as pg_recvlogical does when it reaches
// --endpos, and reports what was received; closing the connection ends
// the replication.
func finishRecv(confirm func(pglogrepl.LSN) error, end pglogrepl.LSN, messages, inserts int64, stdout io.Writer) error {
	if err := confirm(end); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "received %d messages, %d inserts, up to %s\n", messages, inserts, end)
	return nil
}
