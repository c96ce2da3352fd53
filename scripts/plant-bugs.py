#!/usr/bin/env python3
"""Plants each known bug in a scratch copy of the repository and checks that the test meant to
catch it fails: a check counts only once it has been seen failing.

Each bug is one textual change to one file (the fence, the wake-up or the rule a protocol needs)
and the command of the check that must fail with it. The script copies the tracked files to a
scratch directory, applies one bug at a time, runs its check, restores the file, and reports
`caught` or `MISSED`. It exits non-zero if any bug went unnoticed (or no longer applies: the
code it names moved, so the list needs updating).

    python3 scripts/plant-bugs.py            # every bug
    python3 scripts/plant-bugs.py gate join  # the bugs whose names contain a word

Each check is first run on the unchanged code, where it must pass (a check that fails anyway
proves nothing). Loom checks build into the scratch copy's own target-loom directory; the first
build takes a few minutes, later ones rebuild one crate. Set PLANT_BUGS_DIR to keep the copy.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

LOOM = {"RUSTFLAGS": "--cfg ringbus_loom", "LOOM_MAX_PREEMPTIONS": "3",
        "CARGO_TARGET_DIR": "target-loom"}
CORE = "crates/ringbus-core/src/"
BUS = "crates/ringbus/src/"
NATS = "crates/ringbus-nats/src/"
REDIS = "crates/ringbus-redis/src/"
LINK = "crates/ringbus-link/src/"


def loom(package, test):
    return (LOOM, ["cargo", "test", "-q", "-p", package, "--lib", "--release", "--",
                   "--exact", test])


def plain(package, test_file, test):
    return ({}, ["cargo", "test", "-q", "-p", package, "--test", test_file, "--", "--exact", test])


# (name, file, text to find (exactly once), replacement, check)
BUGS = [
    ("ring: no full fence in wake_source",
     CORE + "shared.rs",
     "        // Pairs with the full fence in `park` (see there).\n        full_fence();\n",
     "",
     loom("ringbus-core", "loom_tests::loom_asym_publish_wakes_parked_reader")),
    ("ring: no full fence in wake_writer",
     CORE + "shared.rs",
     "        // Pairs with the full fence in `Writer::poll_room` after it set `writer_wants`.\n"
     "        full_fence();\n",
     "",
     loom("ringbus-core", "loom_tests::loom_asym_full_writer_is_woken")),
    ("ring: no full fence in the writer's gate scan",
     CORE + "shared.rs",
     "    pub(crate) fn gate(&self, own: u64) -> u64 {\n        full_fence();\n",
     "    pub(crate) fn gate(&self, own: u64) -> u64 {\n",
     loom("ringbus-core", "loom_tests::loom_asym_join_races_the_writers_lap")),
    ("ring: no full fence in a join",
     CORE + "stage.rs",
     "        crate::sync::full_fence();\n",
     "",
     loom("ringbus-core", "loom_tests::loom_asym_join_races_the_writers_lap")),
    ("ring: a joiner starts from another joiner's provisional claim",
     CORE + "stage.rs",
     "let barrier = shared.settled_barrier(group.upstream());",
     "let barrier = shared.barrier(group.upstream()).0;",
     loom("ringbus-core", "loom_tests::loom_concurrent_stage_joins_never_read_lapped_slots")),
    ("ring: the parked writer waits for 64 slots of slack",
     CORE + "writer.rs",
     "self.shared.writer_wants.store(needed, Ordering::SeqCst);",
     "self.shared.writer_wants.store((needed + 64).min(self.next), Ordering::SeqCst);",
     plain("ringbus-core", "poll", "full_big_ring_writer_is_woken_by_the_first_release_it_needs")),
    ("ring: the Stream impl releases only after a successful clone",
     CORE + "reader.rs",
     "                let guard = ReadGuard { reader: this };\n"
     "                Poll::Ready(Some(T::clone(&guard)))\n",
     "                let value = this.current().clone();\n"
     "                this.advance(1);\n"
     "                Poll::Ready(Some(value))\n",
     plain("ringbus-core", "api", "a_stream_item_whose_clone_panics_is_released_and_skipped")),
    ("ring: a failed membarrier falls back to a local fence",
     CORE + "sync.rs",
     "        std::process::abort();\n",
     "        std::sync::atomic::fence(Ordering::SeqCst);\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-core", "--lib", "--", "--exact",
           "sync::membarrier::tests::a_failing_barrier_aborts_instead_of_going_on_unsound"])),
    ("bus reply: a responder's answer is not forwarded to the requester",
     BUS + "reply.rs",
     "        tx.send(Outcome::Forwarded(answer)).ok()?;\n",
     "        drop((tx, answer));\n",
     plain("ringbus", "toolkit", "reply::a_responder_answers_after_its_handler_returned")),
    ("nats request: a reply goes to the oldest waiting request, not to its own",
     NATS + "request.rs",
     "    let Some(responder) = token.and_then(|t| pending.take(t)) else {\n",
     "    let oldest = pending.table().waiting.keys().min().copied();\n"
     "    let Some(responder) = token.and(oldest).and_then(|t| pending.take(t)) else {\n",
     plain("ringbus-nats", "nats",
           "request::a_late_reply_is_dropped_and_counted_never_given_to_the_next_request")),
    ("nats request: NATS's no-responders status is taken for a reply",
     NATS + "request.rs",
     "    if reply.status == Some(StatusCode::NO_RESPONDERS) {\n",
     "    if reply.status == Some(StatusCode::NO_RESPONDERS) && token.is_none() {\n",
     plain("ringbus-nats", "nats",
           "request::nobody_answering_is_unanswered_without_waiting_for_the_deadline")),
    ("nats request: deadlines never expire",
     NATS + "request.rs",
     "            () = expiry => expire(&link, &topic, &pending),\n",
     "            () = expiry => if next.is_none() { expire(&link, &topic, &pending) },\n",
     plain("ringbus-nats", "nats",
           "request::a_late_reply_is_dropped_and_counted_never_given_to_the_next_request")),
    ("nats request: a link may export and import one request topic",
     NATS + "request.rs",
     "        let claims = claim_both_ways(&self.inner, topic)?;\n        let task = import::<T, R, C>",
     "        let claims = (\n"
     "            self.inner.claim(topic, \"unchecked\")?,\n"
     "            self.inner.claim(topic, \"unchecked too\")?,\n"
     "        );\n"
     "        let task = import::<T, R, C>",
     plain("ringbus-nats", "nats", "request::a_request_topic_is_linked_one_way_per_link")),
    ("nats import: a panic in the codec's decode is not caught",
     NATS + "wire.rs",
     "    decode_caught(codec, body, meta).map_err(|_| BadInput::Decode)\n",
     "    codec.decode(body, meta).map_err(|_| BadInput::Decode)\n",
     plain("ringbus-nats", "nats", "link::a_codec_that_panics_costs_its_message_only")),
    ("redis import: a panic in the codec's decode is not caught",
     REDIS + "wire.rs",
     "    decode_caught(codec, body, meta).map_err(|_| BadInput::Decode)\n",
     "    codec.decode(body, meta).map_err(|_| BadInput::Decode)\n",
     plain("ringbus-redis", "redis", "streams::a_codec_that_panics_costs_its_message_only")),
    ("nats: JetStream waits of Duration::MAX are sent as they are",
     NATS + "link.rs",
     "        self.jetstream = options.clamped();\n",
     "        self.jetstream = options;\n",
     plain("ringbus-nats", "nats", "link::waits_without_a_limit_are_taken_as_very_long_ones")),
    ("redis: stream waits of Duration::MAX are used as they are",
     REDIS + "link.rs",
     "        self.streams = options.clamped();\n",
     "        self.streams = options;\n",
     plain("ringbus-redis", "redis", "streams::waits_without_a_limit_are_taken_as_very_long_ones")),
    ("nats import: dead-letters on the link's max_deliver, not on the consumer's",
     NATS + "import.rs",
     "    had.max_deliver\n}\n",
     "    config.max_deliver\n}\n",
     plain("ringbus-nats", "nats",
           "link::an_existing_consumer_keeps_its_settings_and_the_link_follows_them")),
    ("memory nats: queue groups deliver to every member",
     NATS + "testing/memory.rs",
     "            match &sub.queue {\n",
     "            match &None::<String> {\n",
     plain("ringbus-nats", "nats",
           "request::shared_imports_answer_each_request_once_and_fan_out_imports_each_answer")),
    ("memory nats: no-echo is not honoured",
     NATS + "testing/memory.rs",
     "        if client_id == from && !client.echo {\n",
     "        if client_id == from && !client.echo && client_id == 0 {\n",
     plain("ringbus-nats", "nats",
           "memory::a_topic_linked_both_ways_does_not_echo_through_the_stand_in")),
    ("redis: XACK before every local handler finished",
     REDIS + "import.rs",
     "            let outcome = match delivery.try_outcome() {\n",
     "            let outcome = match delivery.try_outcome().or(Some(Default::default())) {\n",
     plain("ringbus-redis", "redis", "streams::the_ack_waits_for_every_local_handler")),
    ("redis: a dead consumer's messages are never claimed",
     REDIS + "import.rs",
     "        let taken = if Instant::now() >= next_claim {\n",
     "        let taken = if Instant::now() >= next_claim && false {\n",
     plain("ringbus-redis", "redis",
           "streams::a_message_held_by_a_dead_consumer_is_claimed_and_handled_elsewhere")),
    ("redis: the import's dedup window never remembers an id",
     REDIS + "import.rs",
     "                window.remember(message, &entry.id);\n",
     "",
     plain("ringbus-conformance", "links", "cases::a_re_sent_id_is_delivered_once")),
    ("redis: an XADD that failed is never sent again",
     REDIS + "export.rs",
     "                if !is_connection_error(&e) || sent.elapsed()",
     "                if is_connection_error(&e) || sent.elapsed()",
     plain("ringbus-conformance", "links",
           "cases::nothing_acknowledged_is_lost_across_a_server_kill_and_restart")),
    ("redis: a message that cannot be encoded drops the rest of its export batch",
     REDIS + "export.rs",
     "                Err(e) => self.failed(&mut first_error, None, e),\n",
     "                Err(e) => {\n                    self.failed(&mut first_error, None, e);\n"
     "                    return first_error.map_or(Ok(()), Err);\n                }\n",
     plain("ringbus-redis", "redis", "streams::a_message_that_cannot_be_exported_costs_only_itself")),
    ("redis: an import drops the fields a dead letter needs",
     REDIS + "import.rs",
     "            if entry.deliveries < max_deliver {\n",
     "            if entry.deliveries <= max_deliver {\n",
     plain("ringbus-conformance", "links", "cases::dead_letters_after_max_deliveries")),
    ("bus lock: a cancelled waiter does not pass its turn on",
     BUS + "lock.rs",
     "            self.lock.wake_next();\n",
     "",
     loom("ringbus", "lock::loom_tests::loom_cancelled_waiter_passes_its_turn_on")),
    ("bus lock: a waiter sleeps without looking at LOCKED again",
     BUS + "lock.rs",
     "            if s & LOCKED == 0 {\n                continue; // released meanwhile: try again\n            }\n",
     "            let _ = s;\n",
     loom("ringbus", "lock::loom_tests::loom_lock_unlock_hand_off")),
    ("bus lock: try_publish waits for a parked holder",
     BUS + "lock.rs",
     "            if s & PARKED != 0\n",
     "            if false\n",
     loom("ringbus", "lock::loom_tests::loom_try_lock_never_waits_for_a_parked_holder")),
    ("bus progress: close looks without the heavy fence",
     BUS + "progress.rs",
     "                ringbus_core::__private::heavy_fence();\n",
     "",
     loom("ringbus", "progress::loom_tests::loom_close_sees_the_subscriber_catch_up")),
    ("bus progress: a subscriber checks for watchers without the light fence",
     BUS + "progress.rs",
     "        ringbus_core::__private::light_fence();\n        if self.watchers",
     "        if self.watchers",
     loom("ringbus", "progress::loom_tests::loom_close_sees_the_subscriber_catch_up")),
    ("bus parents: a handler span ignores the parent its publish gave",
     BUS + "observe.rs",
     "        (Some(parent), None) => handle_span!(@parent &parent; sub, position,),\n",
     "        (Some(_), None) => handle_span!(sub, position,),\n",
     plain("ringbus-suite", "spans", "a_handler_span_is_a_child_of_the_span_its_publish_gave")),
    ("bus spans: a subscriber task never leaves the copy of its loop it started in",
     BUS + "subscriber.rs",
     "            let switch = observe::spans_wanted() != TRACED;\n",
     "            let switch = false;\n",
     plain("ringbus-suite", "spans_switch",
           "a_tracing_subscriber_installed_while_the_bus_runs_gets_spans_from_the_next_wait_on")),
    ("ring: Batch::release moves the reader on without freeing the slots",
     CORE + "reader.rs",
     "            self.reader.advance(n);\n",
     "            self.reader.cursor += n as u64;\n",
     plain("ringbus-suite", "suite",
           "backpressure::a_subscriber_frees_each_slot_as_soon_as_it_handled_the_message")),
    ("bus subscriber: no budget spent for the messages of a batch after the first",
     BUS + "subscriber.rs",
     "                        || !poll_fn(|cx| Poll::Ready(coop::spend(cx).is_ready())).await\n",
     "",
     plain("ringbus-suite", "suite",
           "neighbour::a_subscriber_that_always_finds_a_message_lets_its_neighbours_run")),
    ("bus map: the shard is picked from the hash's own high bits, unmixed",
     BUS + "map.rs",
     "        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);\n",
     "        let mixed = hash << 8;\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus", "--lib", "--", "--exact",
           "map::tests::shard_counts_are_rounded_up_to_a_power_of_two"])),
    ("bus publish: a publish by name looks its topic up when its future is made",
     BUS + "topic.rs",
     "        Self::publish_to(Named { bus, name }, ctx, msg)\n",
     "        let _ = bus.resolve::<T>(name, None);\n"
     "        Self::publish_to(Named { bus, name }, ctx, msg)\n",
     plain("ringbus-suite", "suite", "types::a_publish_by_name_looks_its_topic_up_when_first_polled")),
    ("bus publish: the first poll's fast path spends no budget",
     BUS + "topic.rs",
     "        unit.made_progress();\n        match writer.try_publish(msg) {\n",
     "        match writer.try_publish(msg) {\n",
     plain("ringbus-suite", "suite",
           "neighbour::a_publisher_that_always_finds_room_lets_its_neighbours_run")),
    ("bus publish: the fast path drops a message that finds the ring full",
     BUS + "topic.rs",
     "            Err(Full(msg)) => Err((msg, Some(guard))),\n",
     "            Err(Full(_)) => Ok(Ok(())),\n",
     plain("ringbus-suite", "suite",
           "backpressure::publish_waits_while_the_slowest_subscriber_is_full")),
    ("bus publish: no closed check under the writer (admit)",
     BUS + "lock.rs",
     "            Some(_) if refused() => Err(Refusal),\n",
     "",
     plain("ringbus-suite", "suite",
           "close::a_publish_that_yielded_before_the_writer_is_refused_by_a_close_meanwhile")),
    ("bus publish: no closed check under the writer (admit), in the loom model",
     BUS + "lock.rs",
     "            Some(_) if refused() => Err(Refusal),\n",
     "",
     loom("ringbus", "lock::loom_tests::loom_no_publish_after_the_close_passed_the_writer")),
    ("bus subscriber: a bounded close waits for the end of the batch",
     BUS + "subscriber.rs",
     "                    if sub.start + handled >= sub.stop_at.load(Ordering::Acquire)\n"
     "                        || !poll_fn",
     "                    if !poll_fn",
     plain("ringbus-suite", "suite",
           "close::a_bounded_close_stops_a_subscriber_in_the_middle_of_what_it_took_at_once")),
    ("bus close_with: the report counts what was left before the grace",
     BUS + "bus.rs",
     "        grace(&mut stopped).await;\n"
     "        for topic in &topics {\n"
     "            topic.close().await;\n"
     "        }\n",
     "        let early = left_unhandled(&topics, &per_topic, &stopped);\n"
     "        grace(&mut stopped).await;\n"
     "        for topic in &topics {\n"
     "            topic.close().await;\n"
     "        }\n"
     "        let left_unhandled = |_: &[_], _: &[_], _: &[_]| early;\n",
     plain("ringbus-suite", "suite", "close::a_bounded_close_reports_what_was_left_when_it_returns")),
    ("bus close_with: any bus's handler counts as inside this bus's handlers",
     BUS + "bus.rs",
     "        if state.in_own_handler() {\n",
     "        if crate::subscriber::current().is_some() {\n",
     plain("ringbus-suite", "suite", "close::a_handler_of_another_bus_waits_for_this_bus_like_any_task")),
    ("bus subscriber: a panic outside the handler is not caught by the task's supervisor",
     BUS + "subscriber.rs",
     "        let poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| this.task.poll(cx)));\n",
     "        let poll = Ok::<_, Box<dyn std::any::Any + Send>>(this.task.poll(cx));\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-suite", "--test", "spans", "--", "--exact",
           "a_panic_outside_the_handler_is_reported_with_what_it_left"])),
    ("bus subscriber: a handler's error leaves the panic guard without its failure",
     BUS + "subscriber.rs",
     "                **failure = Some(Failure::Err(error));\n",
     "                drop(error);\n",
     plain("ringbus-suite", "failures", "handler_errors_are_logged_counted_and_passed_over")),
    ("bus subscriber: a panic in a handler's future counts as a call that finished",
     BUS + "subscriber.rs",
     "            Err(panic) => Poll::Ready(Called::failed(failure, panic)),\n",
     "            Err(_) => Poll::Ready(Called::Done),\n",
     plain("ringbus-suite", "failures", "handler_panics_are_logged_counted_and_passed_over")),
    ("bus subscriber: a thread counts as inside a subscriber after that subscriber's poll",
     BUS + "subscriber.rs",
     "        CURRENT.with(|c| c.set(self.0));\n",
     "",
     plain("ringbus-suite", "suite",
           "close::a_publish_that_yielded_before_the_writer_is_refused_by_a_close_meanwhile")),
    ("bus subscriber: a subscriber's poll never records it as the running subscriber",
     BUS + "subscriber.rs",
     "        Self(CURRENT.with(|c| c.replace(Some(current))))\n",
     "        let _ = current;\n        Self(CURRENT.with(Cell::get))\n",
     plain("ringbus-suite", "suite",
           "close::close_from_inside_a_handler_returns_and_drains_everything")),
    ("bus receipts: a subscriber that ended before the publish counts as one that missed it",
     BUS + "topic.rs",
     "            .filter(|s| s.start <= position && !s.done.is_cancelled())\n",
     "            .filter(|s| s.start <= position)\n",
     plain("ringbus-suite", "suite", "delivery::a_subscriber_gone_before_the_publish_is_not_counted")),
    ("bus subscriber: the stall timer is polled with the budget the handler used up",
     BUS + "subscriber.rs",
     "            if had_budget && !tokio::task::coop::has_budget_remaining() {\n",
     "            if false {\n",
     plain("ringbus-suite", "suite",
           "backpressure::a_handler_that_spends_its_whole_budget_on_every_poll_is_still_timed_out")),
    ("nats otel: an export carries no traceparent",
     "crates/ringbus-nats/src/otel.rs",
     "        TraceContextPropagator::new().inject_context(&cx, &mut Headers(headers));\n",
     "        let _ = (cx, Headers(headers));\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-nats", "--features", "otel", "--test", "otel",
           "--", "--exact", "the_trace_crosses_nats_core"])),
    ("redis tls: the link's root certificate never reaches the client",
     REDIS + "link.rs",
     "                root_cert: Some(root.clone()),\n",
     "                root_cert: None,\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-redis", "--features", "tls", "--test", "redis",
           "--", "--exact",
           "streams::tls_round_trips_through_a_tls_only_server_whose_certificate_is_verified"])),
    ("ring: a waker registration that unwinds keeps the slot's lock",
     CORE + "atomic_waker.rs",
     "                let unlock = GiveBack(self);\n",
     "                let unlock = ();\n",
     plain("ringbus-core", "poll",
           "a_waker_that_panics_when_cloned_does_not_break_the_slot_for_the_next_reader")),
    ("ring: a dropped ring stops at the first value whose drop panics",
     CORE + "shared.rs",
     "    fn drop(&mut self) {\n        self.drop_all();\n    }\n",
     "    fn drop(&mut self) {}\n",
     plain("ringbus-core", "drops", "a_value_whose_drop_panics_does_not_leak_the_others")),
    ("bus: a batch that fills the ring exactly waits for more room",
     BUS + "topic.rs",
     "                        None => return Ok(total),\n"
     "                    }\n"
     "                    continue;\n",
     "                        None => {}\n"
     "                    }\n"
     "                    continue;\n",
     plain("ringbus-suite", "suite",
           "backpressure::a_batch_that_exactly_fills_the_room_returns_without_waiting")),
    ("bus: a topic handle's subscribe with a retry policy skips the timer check",
     BUS + "topic.rs",
     "        self.state.stall_timeout(&options)?;\n        // A retry policy",
     "        // A retry policy",
     plain("ringbus-suite", "suite",
           "no_runtime::a_retry_policy_without_a_time_driver_is_an_error")),
    ("bus subscriber: a stall timeout past the clock's range overflows",
     BUS + "subscriber.rs",
     "        let Some(deadline) = tokio::time::Instant::now().checked_add(timeout) else {",
     "        let Some(deadline) = Some(tokio::time::Instant::now() + timeout) else {",
     plain("ringbus-suite", "suite",
           "backpressure::a_stall_timeout_too_long_for_the_clock_never_fires")),
    ("links: a close's deadline overflows the clock",
     LINK + "engine.rs",
     "    start\n"
     "        .checked_add(timeout)\n"
     "        .unwrap_or_else(|| start + LONGEST_WAIT)\n",
     "    start + timeout + (LONGEST_WAIT - LONGEST_WAIT)\n",
     plain("ringbus-conformance", "links",
           "cases::a_close_with_an_unrepresentable_deadline_finishes")),
    ("links: a dropped link call keeps its claim on the topic",
     LINK + "engine.rs",
     "        if let Some(key) = self.key.take() {\n"
     "            self.claims.linked().remove(&key);\n"
     "        }\n",
     "        let _ = self.key.take();\n",
     plain("ringbus-nats", "nats",
           "link::a_link_call_dropped_midway_leaves_the_topic_free_to_link_again")),
    ("nats import: a durable consumer reading another topic's subject is taken as ours",
     "crates/ringbus-nats/src/import.rs",
     "            if *reads != subject {\n",
     "            if *reads != subject && false {\n",
     plain("ringbus-nats", "nats",
           "link::two_topics_with_one_consumer_name_are_an_error_not_a_shared_consumer")),
    ("bus: a handler of any bus may publish into a closed bus",
     BUS + "bus.rs",
     "            .is_some_and(|current| current.bus == std::ptr::from_ref(self) as usize)\n",
     "            .is_some_and(|current| current.bus != 0)\n",
     plain("ringbus-suite", "suite",
           "close::a_handler_of_another_bus_cannot_publish_into_a_closed_bus")),
    ("bus: making a topic does not wake close's look at the counts",
     BUS + "bus.rs",
     "        });\n        // A `quiescent` pass that saw the list of topics change is not idle, and waits for\n",
     "        });\n        #[cfg(any())]\n",
     plain("ringbus-suite", "suite", "close::close_returns_while_topics_are_being_made")),
]


def main():
    words = sys.argv[1:]
    bugs = [b for b in BUGS if not words or any(w in b[0] for w in words)]
    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True).stdout.strip()
    scratch = os.environ.get("PLANT_BUGS_DIR") or tempfile.mkdtemp(prefix="ringbus-bugs-")
    files = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(scratch, f)) or scratch, exist_ok=True)
        shutil.copy2(os.path.join(repo, f), os.path.join(scratch, f))
    print(f"scratch copy: {scratch}", flush=True)
    # First, each check on the unchanged code: it must pass there, or its failure with a bug
    # planted would prove nothing.
    missed = []
    for (env, cmd) in {tuple(map(str, c[1])): c for *_, c in bugs}.values():
        run = subprocess.run(cmd, cwd=scratch, env={**os.environ, **env}, capture_output=True,
                             text=True, timeout=1800)
        ok = run.returncode == 0 and " 1 passed" in run.stdout
        print(f"{'passes' if ok else 'FAILS':7} without a bug: {cmd[-1]}", flush=True)
        if not ok:
            missed.append(f"{cmd[-1]} (fails, or runs no test, on the unchanged code)")
    for name, path, find, replace, (env, cmd) in bugs:
        target = os.path.join(scratch, path)
        with open(target) as fh:
            original = fh.read()
        if original.count(find) != 1:
            print(f"STALE   {name}: the text to change is not in {path} exactly once", flush=True)
            missed.append(name)
            continue
        with open(target, "w") as fh:
            fh.write(original.replace(find, replace))
        started = time.time()
        try:
            run = subprocess.run(cmd, cwd=scratch, env={**os.environ, **env},
                                 capture_output=True, text=True, timeout=1800)
            failed = run.returncode != 0
            built = "error[" not in run.stderr and "could not compile" not in run.stderr
        except subprocess.TimeoutExpired:
            failed, built = True, True  # a hang is a failure of the check, if a slow one
        finally:
            with open(target, "w") as fh:
                fh.write(original)
        verdict = "caught" if failed and built else "MISSED"
        if not built:
            verdict = "BROKEN"  # the planted change did not compile: fix the list
        if verdict != "caught":
            missed.append(name)
        print(f"{verdict:7} {name} ({time.time() - started:.0f} s)", flush=True)
    if "PLANT_BUGS_DIR" not in os.environ:
        shutil.rmtree(scratch, ignore_errors=True)
    if missed:
        print(f"{len(missed)} of {len(bugs)} checks did not hold:", *missed, sep="\n  ")
        sys.exit(1)
    print(f"all {len(bugs)} planted bugs were caught")


if __name__ == "__main__":
    main()
