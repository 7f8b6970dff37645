-- KEYS[1] lock key, then either KEYS[2] the waiters queue, or KEYS[2] the
-- waiters queue, KEYS[3] the waiters' data, KEYS[4] the wake-up list,
-- KEYS[5] the fence counter (all with the same hash tag); ARGV[1] token,
-- ARGV[2] (with five keys) what a waiter's hand-off list is named, less
-- the waiter's token, ARGV[3] (optional) the bound in ms under which a
-- front waiter's wait does not make the release hand it the lock (see
-- parts/serve_queue.lua; absent: every release hands over, fair).
-- Compare-and-delete: 1 released, 0 the key is gone or holds another token
-- (we must not delete the next holder's), 3 released and the lock handed
-- over or waiters woken (five keys only: the caller may send five keys
-- next time).
-- Without a waiters queue nobody waits (every refused waiter joins it, see
-- acquire.lua, and it outlives their waits): the key is just deleted. With two
-- keys and waiters, nothing is done and the reply is 2: the caller then
-- sends the five-key form. (Two keys keep the uncontended release as small
-- as the plain one: every argument costs both sides.)
-- The direct hand-off: the waiter at the front of the queue (waiters that
-- no longer count as waiting are dropped on the way, and so are waiters
-- without data, from a version before the hand-off, which are woken
-- instead: they add themselves again when they try again) that blocks on its
-- hand-off list gets the lock in this same step: the key holds its token
-- for its ttl, with a new fence when it asked for one, and its hand-off
-- list one element "fence server-ms", which its BLPOP returns: it holds
-- the lock with no further request, and its validity counts from this
-- server ms (see redlock.notify). The list lives as long as the lock.
-- A waiter inside nginx ("p" in acquire.lua) blocks on no connection: its
-- hand-off goes, instead of the list, as "<token> fence server-ms" on the
-- channel "redlock:wake", where its worker's subscriber hands it to
-- exactly that waiter (redlock.nginx.wait): it too holds the lock with no
-- further request, and no list is left behind for it. One queue, one
-- script, whatever host each waiter runs in; a PUBLISH only for the
-- waiters that need one (a Cluster sends each to every node).
-- (Its name is not among KEYS, which the caller cannot know: while a
-- Cluster slot migrates, a node refuses such a key that it does not hold
-- yet; then that waiter is woken instead, below, as its BLPOP also watches
-- the wake-up list. Before the hand-off the list is empty: the waiter's
-- refusal emptied it, and it is in the queue for one hand-off only.)
-- A front waiter that only wants to be woken, or a server without TIME,
-- gets the key deleted and the wake-up list left with exactly one element,
-- which lives 1 s (one already there is kept, not deleted and pushed
-- again: while a Cluster slot migrates, a node refuses to create a key in
-- a script, even one the script has just deleted; the keys named in KEYS
-- exist there, or the node answers TRYAGAIN before the script runs):
-- Redis hands it to the longest-blocked BLPOP waiter on
-- it, or to the next one to BLPOP within that second (a release between a
-- waiter's failed attempt and its BLPOP is not lost); the key is also
-- published on the channel "redlock:wake", for the waiters inside nginx,
-- which cannot block on a connection each: one subscriber per worker wakes
-- them (redlock.nginx.wait).
-- Callers passing one key get neither (plain compare-and-delete).
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if not KEYS[2] or redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
if not KEYS[3] then return 2 end
local key = KEYS[1]
--@include parts/fence.lua
--@include parts/serve_queue.lua
