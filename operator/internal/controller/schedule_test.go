package controller

import (
	"reflect"
	"testing"
)

func TestPlanCompaction(t *testing.T) {
	cases := []struct {
		name              string
		start, end, runs  int32
		schedules, starts []string
		slot              int64
		wantErr           bool
	}{
		{name: "window wraps midnight 22->04, 4 runs", start: 22, end: 4, runs: 4,
			schedules: []string{"0 1,22 * * *", "30 2,23 * * *"},
			starts:    []string{"22:00", "23:30", "01:00", "02:30"}, slot: 90 * 60},
		{name: "default window 00->06, 4 runs", start: 0, end: 6, runs: 4,
			schedules: []string{"0 0,3 * * *", "30 1,4 * * *"},
			starts:    []string{"00:00", "01:30", "03:00", "04:30"}, slot: 90 * 60},
		{name: "one run per hour", start: 1, end: 5, runs: 4,
			schedules: []string{"0 1,2,3,4 * * *"},
			starts:    []string{"01:00", "02:00", "03:00", "04:00"}, slot: 3600},
		{name: "several runs inside one hour share an expression", start: 10, end: 11, runs: 4,
			schedules: []string{"0,15,30,45 10 * * *"},
			starts:    []string{"10:00", "10:15", "10:30", "10:45"}, slot: 15 * 60},
		{name: "equal start and end means all day", start: 0, end: 0, runs: 24,
			schedules: []string{"0 * * * *"}, slot: 3600,
			starts: []string{"00:00", "01:00", "02:00", "03:00", "04:00", "05:00", "06:00", "07:00", "08:00", "09:00", "10:00", "11:00",
				"12:00", "13:00", "14:00", "15:00", "16:00", "17:00", "18:00", "19:00", "20:00", "21:00", "22:00", "23:00"}},
		{name: "single run in a wrapping window", start: 23, end: 1, runs: 1,
			schedules: []string{"0 23 * * *"}, starts: []string{"23:00"}, slot: 2 * 3600},
		{name: "uneven split rounds down to the minute", start: 2, end: 3, runs: 7,
			schedules: []string{"0,8,17,25,34,42,51 2 * * *"},
			starts:    []string{"02:00", "02:08", "02:17", "02:25", "02:34", "02:42", "02:51"}, slot: 514},
		{name: "zero runs disables compaction", start: 22, end: 4, runs: 0},
		{name: "hour out of range", start: 24, end: 4, runs: 1, wantErr: true},
		{name: "more runs than minutes", start: 1, end: 2, runs: 61, wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanCompaction(tc.start, tc.end, tc.runs)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if !reflect.DeepEqual(p.Schedules, tc.schedules) {
				t.Errorf("schedules = %q, want %q", p.Schedules, tc.schedules)
			}
			if !reflect.DeepEqual(p.Starts, tc.starts) {
				t.Errorf("starts = %q, want %q", p.Starts, tc.starts)
			}
			if p.SlotSeconds != tc.slot {
				t.Errorf("slot = %d, want %d", p.SlotSeconds, tc.slot)
			}
		})
	}
}
