package backup

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Retention is a grandfather-father-son policy; zero fields keep nothing by
// that rule. The newest backup is always kept.
type Retention struct {
	KeepLast, KeepDaily, KeepWeekly, KeepMonthly int
}

// Select splits backups (newest first) into those to keep and to prune.
// keepDaily keeps the newest backup of each of the N most recent days that
// have one; weekly (ISO weeks) and monthly likewise. Days are UTC.
func Select(backups []Manifest, r Retention) (keep, prune []Manifest) {
	kept := make([]bool, len(backups))
	if len(backups) > 0 {
		kept[0] = true
	}
	for i := 0; i < len(backups) && i < r.KeepLast; i++ {
		kept[i] = true
	}
	bucket := func(n int, key func(time.Time) string) {
		seen := map[string]bool{}
		for i, b := range backups {
			if len(seen) >= n {
				return
			}
			k := key(b.End.UTC())
			if !seen[k] {
				seen[k] = true
				kept[i] = true
			}
		}
	}
	bucket(r.KeepDaily, func(t time.Time) string { return t.Format("2006-01-02") })
	bucket(r.KeepWeekly, func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d-W%02d", y, w) })
	bucket(r.KeepMonthly, func(t time.Time) string { return t.Format("2006-01") })
	for i, b := range backups {
		if kept[i] {
			keep = append(keep, b)
		} else {
			prune = append(prune, b)
		}
	}
	return keep, prune
}

// Prune applies r to series s's backups under prefix; other series and
// backups from before series were recorded are never touched. The manifest
// goes first, so an interrupted prune leaves data that no longer counts,
// never a manifest without data. Data that no manifest names (an attempt
// that died before its manifest) goes too once a newer backup is complete.
func Prune(ctx context.Context, st Storage, prefix string, s Series, r Retention) (keep []Manifest, pruned int, err error) {
	l, err := list(ctx, st, prefix, s, true)
	if err != nil {
		return nil, 0, err
	}
	keep, drop := Select(l.trusted, r)
	for _, m := range drop {
		if err := st.Delete(ctx, manifestKey(prefix, m.ID, s)); err != nil {
			return keep, pruned, err
		}
		for _, k := range m.keys() {
			if err := st.Delete(ctx, k); err != nil {
				return keep, pruned, err
			}
		}
		pruned++
	}
	if len(keep) > 0 && s.UID != "" {
		err = deleteOrphans(ctx, st, prefix, s, keep, l.untrusted)
	}
	return keep, pruned, err
}

// deleteOrphans removes series s's data keys older than its newest backup
// that no kept manifest names. What a manifest it does not trust names
// stays too (a backup from before its series key: not restorable with
// the key, and not daytwo's to delete either).
func deleteOrphans(ctx context.Context, st Storage, prefix string, s Series, keep, untrusted []Manifest) error {
	keys, err := st.List(ctx, prefix)
	if err != nil {
		return err
	}
	named := map[string]bool{}
	for _, m := range append(slices.Clone(keep), untrusted...) {
		for _, k := range m.keys() {
			named[k] = true
		}
	}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, prefix)
		id, tail, ok := strings.Cut(rest, s.tag()+".")
		if !ok || named[k] || !strings.HasSuffix(tail, dataSuffix) || strings.Contains(rest, "/") || id >= keep[0].ID {
			continue
		}
		if err := st.Delete(ctx, k); err != nil {
			return err
		}
	}
	return nil
}
