package controller

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// CompactionPlan is the outcome of deriving cron schedules from a compaction window.
type CompactionPlan struct {
	// Schedules are 5-field cron expressions; together they fire RunsPerDay times a day.
	Schedules []string
	// Starts are the run start times ("HH:MM"), in firing order from the window start.
	Starts []string
	// SlotSeconds is the time between two runs: a run's Job gets this as its deadline
	// so it never overlaps the next run nor outlives the window.
	SlotSeconds int64
}

// PlanCompaction spreads runs evenly over the window [start, end) (hours 0–23,
// wrapping midnight when end < start; start == end means the whole day). Run i
// starts at start + i*window/runs (minute precision). Times are grouped into as
// few cron expressions as possible: minutes sharing the same set of hours share
// one expression. runs == 0 gives an empty plan.
func PlanCompaction(start, end, runs int32) (CompactionPlan, error) {
	if start < 0 || start > 23 || end < 0 || end > 23 {
		return CompactionPlan{}, fmt.Errorf("compaction window hours must be 0-23, got %d-%d", start, end)
	}
	if runs < 0 {
		return CompactionPlan{}, fmt.Errorf("runsPerDay must not be negative, got %d", runs)
	}
	if runs == 0 {
		return CompactionPlan{}, nil
	}
	hours := (end - start + 24) % 24
	if hours == 0 {
		hours = 24
	}
	window := int64(hours) * 60
	if int64(runs) > window {
		return CompactionPlan{}, fmt.Errorf("%d runs do not fit in a %d-hour window at minute precision", runs, hours)
	}
	plan := CompactionPlan{SlotSeconds: window * 60 / int64(runs)}
	byMinute := map[int][]int{}
	for i := int64(0); i < int64(runs); i++ {
		t := (int64(start)*60 + i*window/int64(runs)) % (24 * 60)
		h, m := int(t/60), int(t%60)
		plan.Starts = append(plan.Starts, fmt.Sprintf("%02d:%02d", h, m))
		byMinute[m] = append(byMinute[m], h)
	}
	// Merge minutes with identical hour sets.
	byHours := map[string][]int{}
	for m, hs := range byMinute {
		sort.Ints(hs)
		key := hourField(hs)
		byHours[key] = append(byHours[key], m)
	}
	for hs, ms := range byHours {
		sort.Ints(ms)
		plan.Schedules = append(plan.Schedules, joinInts(ms)+" "+hs+" * * *")
	}
	// Deterministic order: by the first minute, then hour field.
	sort.Slice(plan.Schedules, func(i, j int) bool {
		a, b := plan.Schedules[i], plan.Schedules[j]
		ma, _ := strconv.Atoi(strings.Split(strings.Fields(a)[0], ",")[0])
		mb, _ := strconv.Atoi(strings.Split(strings.Fields(b)[0], ",")[0])
		if ma != mb {
			return ma < mb
		}
		return a < b
	})
	return plan, nil
}

func hourField(hs []int) string {
	if len(hs) == 24 {
		return "*"
	}
	return joinInts(hs)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
