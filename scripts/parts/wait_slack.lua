-- A waiter counts as waiting until its next block ends (at most the
-- holder's pttl and its own bound) plus this slack, in ms: a waiter that
-- has not asked again by then is skipped and dropped (see acquire.lua).
local SLACK_MS = 1000
