// Package queue owns the durable per-(tenant, flow) log: its frames, the
// checkpoint, the retry schedule, the id counter, dead letters and their
// marks, the worker loop and its verdicts, housekeeping, and the lock files.
//
// It knows nothing of flows: a worker hands a message to a handler and gets a
// verdict back (ack, retry, retry-later, dead-letter or drop).
//
// # Files
//
// A queue is the folder {root}/{tenant}/{flow}/, created only after both
// names pass the name rule (package naming). It holds:
//
//	segment.log          the messages, one frame each, appended in order
//	segment.log.ckpt     the byte offset up to which everything is processed
//	segment.log.retry    the retry schedule: its changes, one frame each, with absolute times
//	segment.log.seq      the next message id (never reissued)
//	dlq.log              dead-lettered messages, one frame each
//	dlq.log.acked        marks of dead letters replayed or discarded, one frame each
//	append.lock          flock(2) held while appending or draining (all processes);
//	                     holds a copy of the id counter as the last drain left it
//	worker.lock          flock(2) held by the one process whose worker delivers the queue
//	*.tmp                a replacement being written (see below)
//
// No folder or file of a queue may be a symbolic link: a queue refuses to
// open (ErrLink), and writes nothing, when one is (see ErrLink).
//
// # Frames
//
// segment.log, segment.log.retry, dlq.log and dlq.log.acked are sequences
// of frames. A frame is a 12-byte header and a record; integers are
// big-endian:
//
//	offset  size  field
//	0       4     magic "NXQ1" (0x4e 0x58 0x51 0x31): lets recovery find the
//	              next frame after a damaged one
//	4       4     length of the record in bytes (at most MaxRecord, and
//	              MaxRecord+20 for a retry that carries its message)
//	8       4     CRC-32C (Castagnoli) of bytes 4..8 and the record; each
//	              frame has its own CRC (not chained), so one damaged frame
//	              does not condemn the frames after it
//	12      n     the record
//
// The record starts with its kind (1 byte). A message (kind 1, segment.log):
//
//	0   1   kind = 1
//	1   8   id (uint64)
//	9   8   enqueued at (int64 Unix nanoseconds)
//	17  1   source length s (the door it came through: "enqueue", "cron"; "replay" for a dead letter replayed)
//	18  s   source
//	    2   correlation ID length c (at most 1024)
//	    c   correlation ID
//	    …   the payload (JSON) to the end of the record
//
// A dead letter (kind 2, dlq.log):
//
//	0   1   kind = 2
//	1   8   id (uint64): the message's own id
//	9   8   enqueued at (int64 Unix nanoseconds)
//	17  8   dead-lettered at (int64 Unix nanoseconds)
//	25  4   attempts (uint32)
//	29  4   last error length e
//	33  e   last error (UTF-8)
//	    …   the payload as submitted, to the end of the record
//
// A mark (kind 3, dlq.log.acked):
//
//	0   1   kind = 3
//	1   8   id (uint64) of the dead letter
//	9   8   marked at (int64 Unix nanoseconds)
//	17  1   action: 1 replayed, 2 discarded
//	18  8   for a replay, the id of the message it appended (optional: a
//	        mark is 18 or 26 bytes)
//
// A retry set (kind 4, segment.log.retry): the message's retry, which
// replaces any entry of the same id:
//
//	0   1   kind = 4
//	1   8   id (uint64) of the message
//	9   8   offset (uint64) of the message's frame in segment.log
//	17  4   attempt (uint32): the attempt that is due
//	21  8   due time (int64 Unix nanoseconds, wall clock)
//
// A retry clear (kind 5, segment.log.retry): the message's entry leaves the
// schedule (a clear of an id with no entry changes nothing):
//
//	0   1   kind = 5
//	1   8   id (uint64) of the message
//
// A retry set that carries its message (kind 6, segment.log.retry): the
// message's retry, which replaces any entry of the same id, as kind 4 does,
// and the message it delivers, so that segment.log may be emptied while it
// waits. The first 29 bytes are those of kind 4; the rest are the fields
// of the message's record (kind 1) after its id, as segment.log held them:
//
//	0   1   kind = 6
//	1   8   id (uint64) of the message
//	9   8   offset (uint64) of the message's frame in segment.log when it
//	        was scheduled (a message still there and waiting for its retry
//	        is told by its id and this offset; after a drain it names
//	        another message, or none, and is not read)
//	17  4   attempt (uint32): the attempt that is due
//	21  8   due time (int64 Unix nanoseconds, wall clock)
//	29  8   enqueued at (int64 Unix nanoseconds)
//	37  1   source length s
//	38  s   source
//	    2   correlation ID length c (at most 1024)
//	    c   correlation ID
//	    …   the payload (JSON) to the end of the record
//
// It is 20 bytes longer than the message's record, so a frame of
// segment.log.retry may hold up to MaxRecord+20 bytes (readers take records
// up to that length in every file). The worker writes kind 6 for every retry
// it schedules; kind 4, written by older versions (and by SaveRetries for a
// Retry without its Message), is still read, and its retry reads its
// message in segment.log at its offset. Versions before kind 6 refuse a
// schedule that holds one (a record they do not know): an upgrade is one
// way while a retry is pending.
//
// The worker does not hold a kind-6 retry's message in memory: its
// schedule keeps where the frame is in segment.log.retry (its offset and
// length), and, when the retry is due, it reads the frame back, verifies
// it as a reader does (its marker, length and CRC, a kind 6 of the
// retry's id) and decodes the message. A frame that does not verify is
// damage (queue_damage) and the retry is dropped (queue_dropped), as one
// whose message is gone from segment.log is, and the file is rewritten
// without the damaged frame at once (a compaction), so that every reader
// reads it again (a clear appended after it left Retries an error until
// the next compaction). The worker is the file's one
// writer: a compaction copies each kind-6 frame from the old file to the
// new one, one frame at a time (verified as it is read: one that does not
// verify is left out and dropped the same way), and, once the new file is
// renamed into place, the schedule keeps where each frame went. Every
// reader of the file (Retries, the janitor, Drain, and the worker as it
// starts) checks each frame's CRC over the whole record, read through a
// buffer of 64 KiB a part at a time, never whole into memory, and decodes
// the fields it needs from the record's first bytes (a retry's, and a
// carried message's fields but its payload).
//
// The schedule is the records applied in order; among entries due at the
// same time, the one set first runs first. The worker appends one frame,
// and fdatasyncs it, for each change: a failed first attempt or a retry
// that failed again is a set (kind 6), a retry whose message is done (acknowledged,
// dead-lettered, dropped) a clear, written only after the checkpoint past
// the message is durable. It rewrites the file with a set for each live
// entry (of its kind, in the order they were set; a kind 6 copied from the
// file as it is) through the atomic-write helper when
// the file grows past twice that size plus 32 KiB, at an idle moment when
// the changes past the live entries take at least as much room as they do
// (the schedule empty: the file emptied), and after a write that failed
// (never appending after bytes a failed write or fdatasync may have left).
// Versions before it wrote the schedule whole at each change, as one value:
// magic "NXR1", a count n (4 bytes), n entries of id (8), offset (8),
// attempt (4) and due time (8, Unix nanoseconds), then the CRC-32C of
// everything before it (4 bytes). Any process reads that format; the
// worker, as it starts, rewrites it in the log format through the
// atomic-write helper, so that a crash leaves one file or the other, with
// the same entries.
//
// The worker rewrites dlq.log without the marked dead letters at an idle
// moment, empties dlq.log.acked, and logs each mark it applied
// (dlq_replayed, dlq_discarded). It reads the marks under the append lock,
// copies dlq.log to dlq.log.tmp without it (the worker is the one
// appender of dlq.log; the copy of a large file does not hold up the
// doors' appends or the operators' marks), then, under the lock again,
// renames the copy over dlq.log unless dlq.log changed meanwhile, and
// rewrites dlq.log.acked with the marks made since it read them.
//
// # Side files
//
// segment.log.seq and segment.log.ckpt hold one value each: magic (4 bytes:
// "NXS1" or "NXC1"), the value (8 bytes, uint64), CRC-32C of the first 12
// bytes (4 bytes). Both are rewritten in place, and read from their first
// 16 bytes: bytes past them (an editor's newline) are not part of the
// value, and stay. While a drain or the janitor empties the log,
// segment.log.ckpt holds a drain marker of the same shape, magic "NXD1",
// whose value is the next message id when it began: the messages of the
// log being emptied have smaller ids, those appended since larger ones, so
// a drain stopped at any point reads as the offset of the first message
// appended since (or the end), never inside them. A drain (the worker's at
// an idle moment; the janitor's, of an idle queue kept for its retries
// only) empties the log when the checkpoint is at its end and every
// pending retry carries its message (kind 6): one that reads its message
// at its offset (kind 4) keeps the log. It does not touch
// segment.log.retry, each change of which was durable before the worker
// went on, so a drain stopped at any point leaves every pending retry
// deliverable from its record.
//
// The retry schedule's log is compacted through one atomic-write helper: a
// temporary file is written and fsynced, renamed over the old one, and the
// folder is fsynced. The two one-value files are rewritten in place (16
// bytes at offset 0, within one sector):
//
//   - the id counter under the append lock after each batch, without fsync
//     (recovery takes the larger of it and the highest id in the log), and
//     fsynced before the log is emptied, when a drain and the janitor
//     also leave a copy of it in append.lock (16 bytes at offset 0, its
//     format, fsynced, never lowered); a counter missing or that does
//     not verify is raised past the ids of the dead letters, of their
//     marks' replays and of that copy as well (after a drain the log
//     holds none of the ids issued, and a compaction of dlq.log may have
//     removed the dead letters). Open (and the janitor before it deletes
//     a log) writes a counter that does not verify, and reports one that
//     held bytes (queue_damage: fewer than 16, or 16 zeros, as torn).
//     Each batch (and a drain) reads the counter at the path (a file
//     deleted or replaced by hand while the queue is open is opened
//     again), never below what the handle last read or wrote, raises one
//     that does not verify (emptied or overwritten since) as Open does,
//     and reports it as Open does, empty or missing too, since Open left
//     it verifying (Options.OnDamage; the manager logs it queue_damage);
//   - the checkpoint by the worker every CheckpointEvery messages, after a
//     message that finds the last write CheckpointAfter old, and when the
//     queue goes idle, without fsync (a process that dies leaves it in
//     the page cache), and fsynced when the worker stops and by a drain. A
//     power cut can only take it back to an older value, or to 0 when it
//     does not verify: messages are delivered again, never skipped. A
//     checkpoint past the end of the log (left by an older version's
//     drain) reads as 0. It is fsynced too before dlq.log is rewritten
//     without the replayed and discarded dead letters, so that a power cut
//     never takes it back before a message whose dead letter's mark is
//     gone (delivered and dead-lettered again, that message would be
//     pending again). Another process reads it under the append lock only,
//     so it may read a write half done (as 0) or a drain marker the worker
//     is about to replace: Open writes back what it resolved only when no
//     worker runs (it takes worker.lock, and reads the file again under
//     it), never over a running worker's. The worker, as it starts, writes
//     back whatever the file holds that is not a plain checkpoint, so that
//     a value past the end never lives on into a log grown past it. A
//     file that holds neither a checkpoint nor a drain marker is read as
//     0 and reported where it is written back (Open's findings, logged
//     queue_damage by the manager; the worker's log as it starts), or
//     where the janitor deletes it with an idle queue's empty log: fewer
//     than 16 bytes, or 16 zeros, as a torn write, anything else as
//     damage. Open in a process that cannot take worker.lock reports
//     nothing (what it read may be the worker's write half done).
//
// # Recovery
//
// Open scans segment.log under the append lock. A torn tail, a write a
// crash cut short, is truncated and reported: zeros with no valid frame
// after them, a frame header cut short, a header whose record did not all
// arrive (its length past the file's end), or a whole last frame that
// fails its CRC when the part of it in some 512-byte sector (sectors
// counted from the file's start, the part cut at the frame's ends) is all
// zeros, as etcd's WAL decides. (Like etcd's, the rule cannot tell damage
// from a torn write in a frame whose own last bytes, past a sector
// boundary, are zeros: such damage reads as a torn tail.) Any other tail
// is damage (a flipped bit, a changed marker, a length over the limit, or
// past the end with a record whose checksum verifies for the length the
// file holds): reported, never delivered, and kept, the next append going
// after it, so that offsets never go back under a running reader or a
// scheduled retry (the dead-letter files do the same). A reader passes
// such a tail (and waits at a torn one), so the checkpoint passes it and
// the log drains. A damaged frame with valid frames
// after it is quarantined: it is reported (tenant, flow, offset, and id
// when readable), never delivered, and the frames after it, found by their
// magic, are delivered. A length field larger than the file is damage or a
// torn tail, never an allocation. A batch whose fdatasync fails is cut
// from the file before its callers get their error.
//
// segment.log.retry is read by the same rules: any process reads it,
// without writing, up to a torn tail (a change being written, or one a
// crash cut short: the worker waits for each change's fdatasync before it
// acts on it, so such a change was never acted upon), and the worker, as
// it starts (holding worker.lock), truncates that tail, syncs, and logs it
// (queue_damage, torn). Any other damage, a damaged frame in the middle or
// a whole last frame damaged after it was written, is an error for every
// reader but the worker (Retries, the janitor, Drain), and the file is
// left as it is: the queue is neither drained nor deleted by the janitor.
// The worker, as it starts, does as it does with a frame that does not
// verify while it runs: the change the damage held is lost, and said. A
// damaged frame the reader can pass (its CRC fails, its marker is gone,
// with a frame that verifies after it) is reported (queue_damage: the
// file, the offset, the length, and the id as the frame holds it, which
// the damage may have changed); a tail where no frame verifies is
// reported as one damaged region, to the end of the file, as segment.log
// reports such a tail. A retry that no verified change sets after that is
// dropped (queue_dropped, its id): the damaged change was its set. Every
// other retry is delivered: one an earlier change set stays (its attempt
// and due time from that change), and one the damaged change may have
// cleared runs again (at least once, never lost). The worker then
// rewrites the file with the entries that verified (the atomic write), so
// that the damage is reported once and every reader reads the file again.
package queue
