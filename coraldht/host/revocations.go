package host

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
)

// pollRevocations reads the revocation list file every poll interval
// and installs a newer list on the running node, until ctx ends: how a
// revocation reaches every node of a fleet within one interval of the
// file reaching its disk, without a reload. A file that cannot be read
// or does not verify keeps the list installed, and is logged once until
// it changes.
func (i *Instance) pollRevocations(ctx context.Context, f *IdentityFiles, log *slog.Logger) {
	t := time.NewTicker(f.poll())
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		keys, err := fleet.LoadPublicKeys(f.Fleet)
		var l *fleet.RevocationList
		if err == nil {
			l, err = fleet.LoadRevocationList(f.Revocations, keys)
		}
		if errors.Is(err, fs.ErrNotExist) && i.node.Revocations() == nil {
			continue // no list yet, none in force: nothing to say
		}
		if err == nil {
			var installed bool
			if installed, err = i.node.SetRevocations(l); installed {
				log.Info("revocation list installed", "file", f.Revocations, "number", l.Number, "revoked", len(l.Serials))
			}
		}
		if err != nil && err.Error() != last {
			log.Warn("revocation list not installed; keeping the one in force", "file", f.Revocations, "err", err)
		}
		last = ""
		if err != nil {
			last = err.Error()
		}
	}
}
