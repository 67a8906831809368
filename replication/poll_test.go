package replication

import (
	"context"
	"testing"
	"time"

	"github.com/walstream/walstream/internal/testenv"
)

// A publication dropped while the slot is polled is reported as dropped
// (the state without it), never as the error pg_publication_tables raises
// when the publication vanishes between its catalog scan and its lookup:
// that error named neither what was dropped nor how to recreate it.
func TestPollSlotPublicationDropped(t *testing.T) {
	t.Parallel()
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	admin := connect(t, pg.URL("postgres", "postgres"))
	dropper := connect(t, pg.URL("postgres", "postgres"))
	if _, err := admin.Exec(ctx, outboxDDL); err != nil {
		t.Fatal(err)
	}
	for deadline, i := time.Now().Add(5*time.Second), 0; time.Now().Before(deadline); i++ {
		if _, err := admin.Exec(ctx, "CREATE PUBLICATION walstream_outbox FOR TABLE outbox"); err != nil {
			t.Fatal(err)
		}
		dropped := make(chan error, 1)
		go func() {
			_, err := dropper.Exec(ctx, "DROP PUBLICATION walstream_outbox")
			dropped <- err
		}()
		for gone := false; !gone; {
			st, err := PollSlot(ctx, admin, names)
			if err != nil {
				t.Fatalf("round %d, polling while the publication is dropped: %v", i, err)
			}
			gone = !st.PublicationOK
		}
		if err := <-dropped; err != nil {
			t.Fatal(err)
		}
	}
}
