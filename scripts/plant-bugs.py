#!/usr/bin/env python3
"""Plants each known bug in a scratch copy of the repository and checks that the test meant to
catch it fails: a check counts only once it has been seen failing.

Each bug is one textual change to one file (the fence, the wake-up or the rule a protocol needs)
and the command of the check that must fail with it. The script copies the tracked files to a
scratch directory, applies one bug at a time, builds its check, restores the file, and runs the
check's test binary, reporting `caught` or `MISSED`. It exits non-zero if any bug went unnoticed
(or no longer applies: the code it names moved, so the list needs updating).

    python3 scripts/plant-bugs.py            # every bug
    python3 scripts/plant-bugs.py gate join  # the bugs whose names contain a word

Each check is first run on the unchanged code, where it must pass (a check that fails anyway
proves nothing).

The scratch copy builds into the repository's own target directories (`target`, and
`target-loom` for the loom checks; or `$CARGO_TARGET_DIR` and the same with `-loom`), keeping
each file's modification time: cargo hashes a workspace's paths relative to its root, so what
the repository already built is fresh for the copy, and a plant rebuilds only the crate it
changed and what depends on it (incrementally). Builds run one at a time; each check runs from a
copy of its test binary while the next plant builds. At the end the planted files are touched in
the repository, so that its next build does not take the last plant's build for a fresh one.
Set PLANT_BUGS_DIR to keep the copy.
"""

import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

# The loom checks build with their cfg into target-loom (the CI loom step's directory).
LOOM = {"RUSTFLAGS": "--cfg ringbus_loom", "LOOM_MAX_PREEMPTIONS": "3"}
# A check still running after this many seconds is a hang: it counts as failed.
TIMEOUT = 600
# Numbers the copies of test binaries.
COPIES = itertools.count()
CORE = "crates/ringbus-core/src/"
BUS = "crates/ringbus/src/"
NATS = "crates/ringbus-nats/src/"
REDIS = "crates/ringbus-redis/src/"
RABBIT = "crates/ringbus-rabbitmq/src/"
LINK = "crates/ringbus-link/src/"


def loom(package, test):
    return (LOOM, ["cargo", "test", "-q", "-p", package, "--lib", "--release", "--",
                   "--exact", test])


def plain(test_file, test):
    # The whole workspace is selected (test files have one name each across it), so the check
    # builds with the features of `cargo test --workspace` and reuses that build.
    return ({}, ["cargo", "test", "-q", "--workspace", "--test", test_file, "--", "--exact", test])


# The optional features, selected as .ci/run's FEATURES (keep the two the same): the feature
# checks then reuse the build of CI's feature tests.
FEATURES = ["-p", "ringbus", "-p", "ringbus-suite", "-p", "ringbus-nats", "-p", "ringbus-redis",
            "-p", "ringbus-conformance",
            "--features",
            "ringbus/metrics,ringbus-suite/metrics,ringbus-nats/otel,ringbus-redis/tls",
            "--features", "ringbus-conformance/otel"]


def featured(test_file, test):
    return ({}, ["cargo", "test", "-q", *FEATURES, "--test", test_file, "--", "--exact", test])


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
    ("ring: a ring started past 0 takes its first lap's slots as holding values",
     CORE + "shared.rs",
     "!self.lazy || position - self.start >= self.capacity as u64",
     "!self.lazy || position >= self.capacity as u64",
     plain("drops", "lazy_ring_drops_exactly_what_was_published")),
    ("ring: a dropped ring started past 0 drops its first lap from slot 0",
     CORE + "shared.rs",
     "let first = (self.start & self.mask) as usize;",
     "let first = 0;",
     plain("drops", "lazy_ring_drops_exactly_what_was_published")),
    ("bus topic: the first join reads the published count before it holds the writer",
     BUS + "topic/mod.rs",
     "            Slot::Open(_) => return self.ring().ok_or(Error::Closed),\n"
     "        }\n"
     "        let published = self.unrouted.load(Ordering::Relaxed);\n",
     "            Slot::Open(_) => return self.ring().ok_or(Error::Closed),\n"
     "        }\n"
     "        let published = self.unrouted.load(Ordering::Relaxed);\n"
     "        drop(guard);\n"
     "        std::thread::yield_now();\n"
     "        let Some(mut guard) = self.writer.lock_unless_parked() else {\n"
     "            return Err(Error::Closed);\n"
     "        };\n",
     plain("suite", "idle::the_first_join_racing_publishers_keeps_every_position_once")),
    ("bus topic: the ring is made starting at position 0",
     BUS + "topic/mod.rs",
     "            .start_at(published)\n",
     "            .start_at(0)\n",
     plain("suite", "idle::the_first_subscriber_goes_on_from_the_count_published_before_it")),
    ("bus topic: an idle topic's published count leaves out its unrouted messages",
     BUS + "topic/mod.rs",
     "            None => self.unrouted.load(Ordering::Relaxed),\n        }\n    }\n",
     "            None => 0,\n        }\n    }\n",
     plain("suite", "idle::the_first_subscriber_goes_on_from_the_count_published_before_it")),
    ("bus topic: a topic is made without asking the allocator for its ring",
     BUS + "topic/mod.rs",
     "        if let Err(refused) = Self::builder(capacity, &state).probe::<T>() {\n"
     "            return Err(Self::too_large(name, capacity, refused));\n"
     "        }\n",
     "",
     plain("ring_alloc", "a_ring_of_64_gib_the_process_cannot_have_is_an_error")),
    ("ring: the parked writer waits for 64 slots of slack",
     CORE + "writer.rs",
     "self.shared.writer_wants.store(needed, Ordering::SeqCst);",
     "self.shared.writer_wants.store((needed + 64).min(self.next), Ordering::SeqCst);",
     plain("poll", "full_big_ring_writer_is_woken_by_the_first_release_it_needs")),
    ("ring: the Stream impl releases only after a successful clone",
     CORE + "reader.rs",
     "                let guard = ReadGuard { reader: this };\n"
     "                Poll::Ready(Some(T::clone(&guard)))\n",
     "                let value = this.current().clone();\n"
     "                this.advance(1);\n"
     "                Poll::Ready(Some(value))\n",
     plain("api", "a_stream_item_whose_clone_panics_is_released_and_skipped")),
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
     plain("toolkit", "reply::a_responder_answers_after_its_handler_returned")),
    ("nats request: a reply goes to the oldest waiting request, not to its own",
     NATS + "request.rs",
     "    let Some(responder) = token.and_then(|t| pending.take(t)) else {\n",
     "    let oldest = pending.table().waiting.keys().min().copied();\n"
     "    let Some(responder) = token.and(oldest).and_then(|t| pending.take(t)) else {\n",
     plain("nats",
           "request::a_late_reply_is_dropped_and_counted_never_given_to_the_next_request")),
    ("nats request: NATS's no-responders status is taken for a reply",
     NATS + "request.rs",
     "    if reply.status == Some(StatusCode::NO_RESPONDERS) {\n",
     "    if reply.status == Some(StatusCode::NO_RESPONDERS) && token.is_none() {\n",
     plain("nats",
           "request::nobody_answering_is_unanswered_without_waiting_for_the_deadline")),
    ("nats request: deadlines never expire",
     NATS + "request.rs",
     "            () = expiry => expire(&link, &topic, &pending),\n",
     "            () = expiry => if next.is_none() { expire(&link, &topic, &pending) },\n",
     plain("nats",
           "request::a_late_reply_is_dropped_and_counted_never_given_to_the_next_request")),
    ("nats request: a link may export and import one request topic",
     NATS + "request.rs",
     "        let claims = claim_both_ways(&self.inner, topic)?;\n        let task = import::<T, R, C>",
     "        let claims = (\n"
     "            self.inner.runtime.claim(topic, \"unchecked\")?,\n"
     "            self.inner.runtime.claim(topic, \"unchecked too\")?,\n"
     "        );\n"
     "        let task = import::<T, R, C>",
     plain("nats", "request::a_request_topic_is_linked_one_way_per_link")),
    ("nats export: a message that fails drops the rest of its batch",
     NATS + "export.rs",
     "                first_error.get_or_insert(e);\n",
     "                return Err(HandlerError::new(e));\n",
     plain("nats", "link::a_codec_that_panics_costs_its_message_only")),
    ("nats: a stream whose wildcard covers the topic gets the topic's subject too",
     NATS + "shared.rs",
     "        let held = |wanted: &str| info.config.subjects.iter().any(|s| covers(s, wanted));\n",
     "        let held = |wanted: &str| info.config.subjects.iter().any(|s| s == wanted);\n",
     plain("nats", "link::a_stream_whose_wildcard_covers_the_topic_is_used_as_it_is")),
    ("links wire: a panic in the codec's decode is not caught (nats's test)",
     LINK + "wire.rs",
     "    decode_caught(codec, body, meta).map_err(|_| BadInput::Decode)\n",
     "    codec.decode(body, meta).map_err(|_| BadInput::Decode)\n",
     plain("nats", "link::a_codec_that_panics_costs_its_message_only")),
    ("links wire: a panic in the codec's decode is not caught (redis's test)",
     LINK + "wire.rs",
     "    decode_caught(codec, body, meta).map_err(|_| BadInput::Decode)\n",
     "    codec.decode(body, meta).map_err(|_| BadInput::Decode)\n",
     plain("redis", "streams::a_codec_that_panics_costs_its_message_only")),
    ("nats: JetStream waits of Duration::MAX are sent as they are",
     NATS + "link.rs",
     "        self.jetstream = options.clamped();\n",
     "        self.jetstream = options;\n",
     plain("nats", "link::waits_without_a_limit_are_taken_as_very_long_ones")),
    ("redis: stream waits of Duration::MAX are used as they are",
     REDIS + "link.rs",
     "        self.streams = options.clamped();\n",
     "        self.streams = options;\n",
     plain("redis", "streams::waits_without_a_limit_are_taken_as_very_long_ones")),
    ("nats import: dead-letters on the link's max_deliver, not on the consumer's",
     NATS + "import.rs",
     "    had.max_deliver\n}\n",
     "    config.max_deliver\n}\n",
     plain("nats",
           "link::an_existing_consumer_keeps_its_settings_and_the_link_follows_them")),
    ("memory nats: queue groups deliver to every member",
     NATS + "testing/memory.rs",
     "            match &sub.queue {\n",
     "            match &None::<String> {\n",
     plain("nats",
           "request::shared_imports_answer_each_request_once_and_fan_out_imports_each_answer")),
    ("memory nats: no-echo is not honoured",
     NATS + "testing/memory.rs",
     "        if client_id == from && !client.echo {\n",
     "        if client_id == from && !client.echo && client_id == 0 {\n",
     plain("nats",
           "memory::a_topic_linked_both_ways_does_not_echo_through_the_stand_in")),
    ("links import: XACK before every local handler finished",
     LINK + "import.rs",
     "            let outcome = match delivery.try_outcome() {\n",
     "            let outcome = match delivery.try_outcome().or(Some(Default::default())) {\n",
     plain("redis", "streams::the_ack_waits_for_every_local_handler")),
    ("redis: a dead consumer's messages are never claimed",
     REDIS + "import.rs",
     "        let taken = if Instant::now() >= reader.next_claim {\n",
     "        let taken = if Instant::now() >= reader.next_claim && false {\n",
     plain("redis",
           "streams::a_message_held_by_a_dead_consumer_is_claimed_and_handled_elsewhere")),
    ("links import: the dedup window never remembers an id",
     LINK + "import.rs",
     "                window.remember(hash, id, key);\n",
     "",
     plain("links", "cases::a_re_sent_id_is_delivered_once")),
    ("links import: handled messages wait for a full batch before they are acknowledged",
     LINK + "import.rs",
     "        self.deadline.as_mut().await;\n",
     "        std::future::pending::<()>().await;\n",
     plain("redis", "streams::the_ack_waits_for_every_local_handler")),
    ("links import: the dedup window takes a message of a remembered id's hash as a duplicate",
     LINK + "import.rs",
     "(remembered.id == id).then_some(remembered)",
     "Some(remembered)",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::tests::the_window_agrees_with_a_model_and_collisions_only_forget"])),
    ("links import: the dedup window forgets the newest id in place of the oldest",
     LINK + "import.rs",
     "let at = (n % self.capacity as u64) as usize;",
     "let at = (n % self.capacity as u64) as usize;\n        let at = if at == self.ring.len() { at } else { (at + self.capacity - 1) % self.capacity };",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::tests::the_window_agrees_with_a_model_and_collisions_only_forget"])),
    ("links import: the dedup window never sweeps the ids it forgot",
     LINK + "import.rs",
     "            self.index.retain(|_, n| *n >= first);\n",
     "            let _ = first;\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::tests::the_window_agrees_with_a_model_and_collisions_only_forget"])),
    ("links import: a take gives back the room of the messages it hands to the bus",
     LINK + "import.rs",
     "        room.add_permits(free.saturating_sub(held));\n",
     "        room.add_permits(free);\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::runs::the_import_holds_at_most_max_in_flight_and_settles_each_once_handled"])),
    ("links import: what a take holds waits behind a hand-over that waits for room",
     LINK + "import.rs",
     "            None if send(&mut batch) => handing.await,\n",
     "            None if true => handing.await,\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::runs::the_import_holds_at_most_max_in_flight_and_settles_each_once_handled"])),
    ("links import: with the settler gone, a take goes on handing over",
     LINK + "import.rs",
     "            None if send(&mut batch) => handing.await,\n",
     "            None if send(&mut batch) || true => handing.await,\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::runs::with_the_settler_gone_the_import_gives_back_the_rest_and_ends"])),
    ("links import: with the settler gone, the rest of a take is not given back",
     LINK + "import.rs",
     "                // broker's redelivery, the rest goes back at once.\n                for rest in taken {\n",
     "                // broker's redelivery, the rest goes back at once.\n                for rest in taken.skip(usize::MAX) {\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::runs::with_the_settler_gone_the_import_gives_back_the_rest_and_ends"])),
    ("redis import: a claim takes more than the import's room",
     REDIS + "import.rs",
     "        .arg(room.clamp(1, link.streams.read_batch.max(1)));\n",
     "        .arg(link.streams.read_batch.max(1));\n",
     plain("redis", "streams::a_claim_takes_no_more_than_the_imports_room")),
    ("links import: a stop does not end a take that waits",
     LINK + "import.rs",
     "            () = stop.cancelled() => break 'take,\n            taken = inbound.take(&mut reader, free) => taken,\n",
     "            taken = inbound.take(&mut reader, free) => taken,\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "import::runs::the_import_holds_at_most_max_in_flight_and_settles_each_once_handled"])),
    ("redis: an XADD that failed is never sent again",
     REDIS + "export.rs",
     "                if !is_connection_error(&e) || sent.elapsed()",
     "                if is_connection_error(&e) || sent.elapsed()",
     plain("redis", "streams::an_export_made_while_redis_is_down_is_stored_once_it_is_back")),
    ("redis: a message that cannot be encoded drops the rest of its export batch",
     REDIS + "export.rs",
     "                Err(e) => failed(&mut first_error, None, e),\n",
     "                Err(e) => {\n                    failed(&mut first_error, None, e);\n"
     "                    return first_error.map_or(Ok(()), Err);\n                }\n",
     plain("redis", "streams::a_message_that_cannot_be_exported_costs_only_itself")),
    ("nats import: a message given back is never nacked (it waits for ack_wait)",
     NATS + "import.rs",
     "        settle(&self.link, message, AckKind::Nak(delay)).await\n",
     "        let _ = (message, delay);\n        true\n",
     plain("links",
           "cases::a_message_given_back_while_closing_comes_again_after_the_nack_delay")),
    ("rabbitmq: a '.' in a group name is accepted (two imports can share a queue)",
     RABBIT + "error.rs",
     "    if what != \"topic\" && name.contains('.') {\n",
     "    if false {\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-rabbitmq", "--lib", "--", "--exact",
           "error::tests::names_with_wildcards_or_spaces_are_refused_and_debug_leads_with_the_message"])),
    ("redis import: the trace context an entry carries is not read",
     REDIS + "import.rs",
     "        std::str::from_utf8(bytes(entry.fields.get(name)?)?).ok()\n",
     "        let _ = (entry, name);\n        None\n",
     featured("otel", "one_trace_from_publisher_to_remote_handler_over_every_engine")),
    ("rabbitmq import: a batch ack takes a message waiting to be given back",
     RABBIT + "import.rs",
     "            let multiple = run.len() > 1 && !self.waiting_before(tag);\n",
     "            let multiple = run.len() > 1;\n",
     plain("link", "a_batch_ack_leaves_a_message_waiting_to_be_given_back")),
    ("rabbitmq: the connection lets go of its channels before it closes",
     RABBIT + "conn.rs",
     "        self.channels.push((channel.clone(), None));\n",
     "",
     plain("link", "a_close_right_after_the_channels_are_let_go_is_clean")),
    ("rabbitmq pattern export: every topic keeps its channel for good",
     RABBIT + "export.rs",
     "        if self.slots.len() >= kept {\n",
     "        if false && self.slots.len() >= kept {\n",
     plain("link", "a_pattern_over_many_topics_does_not_run_the_connection_out_of_channels")),
    ("rabbitmq pattern export: a channel taken out is let go, not closed",
     RABBIT + "export.rs",
     "            let _ = channel.close(200, \"not used lately\".into()).await;\n",
     "            let _ = &channel;\n",
     plain("link", "a_pattern_over_many_topics_does_not_run_the_connection_out_of_channels")),
    ("rabbitmq pattern export: a channel in use is taken out",
     RABBIT + "export.rs",
     "                .filter(|(_, (slot, _))| Arc::strong_count(slot) == 1)\n",
     "",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-rabbitmq", "--lib", "--",
           "--exact", "export::tests::a_new_topic_takes_out_the_least_recently_used_idle_channels"])),
    ("rabbitmq pattern export: the most recently used channels are taken out",
     RABBIT + "export.rs",
     "            idle.sort_unstable();\n",
     "            idle.sort_unstable_by(|a, b| b.cmp(a));\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-rabbitmq", "--lib", "--",
           "--exact", "export::tests::a_new_topic_takes_out_the_least_recently_used_idle_channels"])),
    ("rabbitmq export: a batch's publishes are first polled last to first",
     RABBIT + "export.rs",
     "        for future in &mut running {\n",
     "        for future in running.iter_mut().rev() {\n",
     plain("links", "cases::order_with_one_subscriber_and_no_loss_right_after_linking")),
    ("rabbitmq export: a batch whose channel failed is given up at once",
     RABBIT + "export.rs",
     "            if progress.elapsed() >= link.queues.publish_retry_for {\n",
     "            if true {\n",
     plain("link", "an_export_made_while_the_server_is_down_is_delivered_once_it_is_back")),
    ("rabbitmq export: a batch stops after its first publish window",
     RABBIT + "export.rs",
     "            let Err(lost) = sent else { continue };\n",
     "            let Err(lost) = sent else { break };\n",
     plain("link", "a_batch_larger_than_the_publish_window_goes_out_whole_and_in_order")),
    ("rabbitmq import: a dead letter loses its reason",
     RABBIT + "import.rs",
     "        headers.insert(DEAD_REASON.into(), AMQPValue::LongString(one_line.into()));\n",
     "",
     plain("links", "cases::a_handler_that_gives_up_has_the_message_dead_lettered_at_once")),
    ("rabbitmq import: a consumer that ended is never made again",
     RABBIT + "import.rs",
     "            reader.consumer = None;\n",
     "",
     plain("links", "cases::still_linked_after_the_connections_drop")),
    ("rabbitmq pattern import: `>` is bound as AMQP's `#` (which matches no token too)",
     RABBIT + "import.rs",
     '        .map(|token| if token == ">" { "*.#" } else { token })\n',
     '        .map(|token| if token == ">" { "#" } else { token })\n',
     plain("link", "a_pattern_import_brings_every_matching_topic_in")),
    ("links pattern import: a message its topic refuses stops the import",
     LINK + "import.rs",
     "        Ok(msg) => local.topic(inbound, &message).map(|local| (msg, local)),\n",
     "        Ok(msg) => match local.topic(inbound, &message) {\n"
     "            Ok(local) => Ok((msg, local)),\n"
     "            Err(_) => return HandedOver::BusClosed,\n"
     "        },\n",
     plain("link", "a_pattern_import_brings_every_matching_topic_in")),
    ("rabbitmq pattern export: every topic goes out under one routing key",
     RABBIT + "export.rs",
     "            let exported = self.exporter.export(topic, &slot, batch).await;\n",
     "            let exported = self.exporter.export(\"items.a\", &slot, batch).await;\n",
     plain("links", "cases::patterns_carry_each_matching_topic_in_order")),
    ("redis pattern export: every topic goes to the first topic's stream",
     REDIS + "export.rs",
     "            let key = self.link.stream_key(topic);\n",
     "            let key = self.link.stream_key(\"orders.eu\");\n",
     plain("redis", "streams::a_pattern_export_adds_each_matching_topic_to_its_stream")),
    ("rabbitmq import: a redelivery counts as a first delivery",
     RABBIT + "import.rs",
     "        if earlier > 0 || !delivery.redelivered {\n",
     "        if earlier > 0 || !delivery.redelivered || true {\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-rabbitmq", "--lib", "--", "--exact",
           "import::tests::redeliveries_are_counted_per_id_and_a_queue_count_wins"])),
    ("links: a message a handler gave up on is acked, not dead-lettered",
     LINK + "engine.rs",
     "        if failed > 0 {\n",
     "        if failed > 0 && missed > 0 {\n",
     plain("links", "cases::one_failing_handler_does_not_run_the_others_again")),
    ("redis: a dead letter of the settler is written without its fields, not read back",
     REDIS + "import.rs",
     "    if entry.fields.iter().next().is_some() {\n",
     "    if true {\n",
     plain("links", "cases::a_handler_that_gives_up_has_the_message_dead_lettered_at_once")),
    ("registry: no fence after a reader counts itself",
     BUS + "map.rs",
     "        counter.fetch_add(1, Ordering::Relaxed);\n        // SeqCst: pairs with `synchronize`'s fence. Either that remover sees this reader\n        // counted, or this reader's loads of the table see what it unlinked.\n        fence(Ordering::SeqCst);\n",
     "        counter.fetch_add(1, Ordering::Relaxed);\n",
     loom("ringbus", "map::loom_tests::loom_remove_waits_for_readers")),
    ("registry: a removal frees without a grace period",
     BUS + "map.rs",
     "        table.slots[slot].store(tombstone(), Ordering::Relaxed);\n        shard.grace.synchronize();\n",
     "        table.slots[slot].store(tombstone(), Ordering::Relaxed);\n",
     loom("ringbus", "map::loom_tests::loom_remove_waits_for_readers")),
    ("registry: the grace period waits for one counter only",
     BUS + "map.rs",
     "        for _ in 0..2 {\n            let epoch = self.epoch.load(Ordering::Relaxed);\n",
     "        for _ in 0..1 {\n            let epoch = self.epoch.load(Ordering::Relaxed);\n",
     loom("ringbus", "map::loom_tests::loom_a_late_reader_is_waited_for_by_the_next_removal")),
    ("registry: a removal does not look for holders after the grace period",
     BUS + "map.rs",
     "        if !idle(unsafe { &(*node).value }) {\n",
     "        if false {\n",
     loom("ringbus", "map::loom_tests::loom_a_holder_taken_in_the_race_keeps_the_entry")),
    ("registry: a publish by name that waits does not hold its topic",
     BUS + "topic/publish.rs",
     "    pub(crate) fn own(self) -> Option<Arc<TopicInner<T>>> {\n        self.owned\n",
     "    pub(crate) fn own(self) -> Option<Arc<TopicInner<T>>> {\n        self.owned.filter(|_| false)\n",
     plain("suite", "removal::every_holder_keeps_its_topic")),
    ("registry: a removal keeps the tables it replaced",
     BUS + "map.rs",
     "            for table in grow.tables.drain(..current) {\n",
     "            for table in grow.tables.drain(..current.min(0)) {\n",
     plain("alloc_bus", "removed_topics_give_their_memory_back")),
    ("registry: the list of tables keeps its grown capacity after removals",
     BUS + "map.rs",
     "            grow.tables.shrink_to_fit();\n",
     "",
     plain("alloc_bus", "removed_topics_give_their_memory_back")),
    ("registry: the bus removes topics that something holds",
     BUS + "bus.rs",
     "        let removed = topics.remove(name, |entry| Arc::strong_count(&entry.erased) == 2);\n",
     "        let removed = topics.remove(name, |_| true);\n",
     plain("suite", "removal::removals_racing_subscribes_and_publishes_lose_nothing")),
    ("idle policy: making a topic sweeps nothing",
     BUS + "bus.rs",
     "        self.sweep();\n",
     "",
     plain("suite", "removal::an_idle_policy_removes_what_nothing_holds_as_topics_are_made")),
    ("idle policy: a topic is removed before its time",
     BUS + "bus.rs",
     "                if idle.is_some_and(|idle| idle >= sweep.after) {\n",
     "                if idle.is_some() {\n",
     plain("suite", "removal::an_idle_policy_waits_for_its_time")),
    ("idle policy: publishes do not keep a topic",
     BUS + "sweep.rs",
     "        if since == NOT_IDLE || self.published.load(Ordering::Relaxed) != published {\n",
     "        if since == NOT_IDLE {\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus", "--lib", "--", "--exact",
           "sweep::tests::a_topic_is_idle_from_when_it_was_first_seen_free_and_unpublished"])),
    ("registry: a publish by name runs user code under its lookup's reading",
     BUS + "bus.rs",
     "            Ok(t) => t.topic.try_publish(msg),\n",
     "            Ok(t) => {\n                let _reading = self.inner.topics.get(topic);\n                t.topic.try_publish(msg)\n            }\n",
     plain("suite", "removal::code_run_by_a_publish_may_make_topics_while_another_thread_removes")),
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
     BUS + "subscriber/span.rs",
     "        (Some(parent), None) => handle_span!(@parent &parent; sub, position,),\n",
     "        (Some(_), None) => handle_span!(sub, position,),\n",
     plain("spans", "a_handler_span_is_a_child_of_the_span_its_publish_gave")),
    ("bus spans: a subscriber task never leaves the form of its loop (plain or traced) it started in",
     BUS + "subscriber/task.rs",
     "            let switch = span::spans_wanted() != R::TRACED;\n",
     "            let switch = false;\n",
     plain("spans_switch",
           "a_tracing_subscriber_installed_while_the_bus_runs_gets_spans_from_the_next_wait_on")),
    ("ring: Batch::release moves the reader on without freeing the slots",
     CORE + "reader.rs",
     "            self.reader.advance(n);\n",
     "            self.reader.cursor += n as u64;\n",
     plain("suite",
           "backpressure::a_subscriber_frees_each_slot_as_soon_as_it_handled_the_message")),
    ("bus subscriber: no budget spent for the messages of a run after the first unit's",
     BUS + "subscriber/task.rs",
     "                && !poll_fn(|cx| Poll::Ready(coop::spend(cx).is_ready())).await\n",
     "                && false\n",
     plain("suite",
           "neighbour::a_subscriber_that_always_finds_a_message_lets_its_neighbours_run")),
    ("bus map: the shard is picked from the hash's own high bits, unmixed",
     BUS + "map.rs",
     "        let mixed = hash.wrapping_mul(0x9e37_79b9_7f4a_7c15);\n",
     "        let mixed = hash << 8;\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus", "--lib", "--", "--exact",
           "map::tests::shard_counts_are_rounded_up_to_a_power_of_two"])),
    ("registry: a listing does not wait for a removal in progress",
     BUS + "map.rs",
     "            let _grow = shard.grow.lock().unwrap_or_else(|e| e.into_inner());\n            // SAFETY: we hold `grow`, so this is `current`, and nothing is freed meanwhile.\n            let table = unsafe { &*shard.current.load(Ordering::Relaxed) };\n            for p in table.nodes() {\n",
     "            let _grow = self.read(shard);\n            // SAFETY: as the reading's lookups.\n            let table = unsafe { &*shard.current.load(Ordering::Acquire) };\n            for p in table.nodes() {\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus", "--lib", "--", "--exact",
           "map::tests::a_listing_during_a_refused_removal_lists_the_entry"])),
    ("bus publish: a publish by name looks its topic up when its future is made",
     BUS + "bus.rs",
     "        TopicInner::publish_to(named, ctx, msg)\n",
     "        let _ = self.resolve::<T>(topic, None);\n"
     "        TopicInner::publish_to(named, ctx, msg)\n",
     plain("suite", "types::a_publish_by_name_looks_its_topic_up_when_first_polled")),
    ("bus publish: the first poll's fast path spends no budget",
     BUS + "topic/publish.rs",
     "        unit.made_progress();\n        match writer.try_publish(msg) {\n",
     "        match writer.try_publish(msg) {\n",
     plain("suite",
           "neighbour::a_publisher_that_always_finds_room_lets_its_neighbours_run")),
    ("bus publish: the fast path drops a message that finds the ring full",
     BUS + "topic/publish.rs",
     "            Err(Full(msg)) => Err((msg, Some(guard))),\n",
     "            Err(Full(_)) => Ok(Ok(())),\n",
     plain("suite",
           "backpressure::publish_waits_while_the_slowest_subscriber_is_full")),
    ("bus publish: no closed check under the writer (admit)",
     BUS + "lock.rs",
     "            Some(_) if refused() => Err(Refusal),\n",
     "",
     plain("suite",
           "close::a_publish_that_yielded_before_the_writer_is_refused_by_a_close_meanwhile")),
    ("bus publish: no closed check under the writer (admit), in the loom model",
     BUS + "lock.rs",
     "            Some(_) if refused() => Err(Refusal),\n",
     "",
     loom("ringbus", "lock::loom_tests::loom_no_publish_after_the_close_passed_the_writer")),
    ("bus subscriber: a bounded close waits for the end of the batch",
     BUS + "subscriber/task.rs",
     "            if D::WHOLE || sub.start + handled >= sub.stop_at.load(Ordering::Acquire) {\n",
     "            if D::WHOLE {\n",
     plain("suite",
           "close::a_bounded_close_stops_a_subscriber_in_the_middle_of_what_it_took_at_once")),
    ("bus close_with: the report counts what was left before the grace",
     BUS + "bus.rs",
     "        grace(&mut stopped, grace_timer).await;\n"
     "        for topic in &topics {\n"
     "            topic.close().await;\n"
     "        }\n",
     "        let early = left_unhandled(&topics, &per_topic, &stopped);\n"
     "        grace(&mut stopped, grace_timer).await;\n"
     "        for topic in &topics {\n"
     "            topic.close().await;\n"
     "        }\n"
     "        let left_unhandled = |_: &[_], _: &[_], _: &[_]| early;\n",
     plain("suite", "close::a_bounded_close_reports_what_was_left_when_it_returns")),
    ("bus close_with: any bus's handler counts as inside this bus's handlers",
     BUS + "bus.rs",
     "        if state.in_own_handler() {\n",
     "        if crate::shared::current().is_some() {\n",
     plain("suite", "close::a_handler_of_another_bus_waits_for_this_bus_like_any_task")),
    ("bus subscriber: a panic outside the handler is not caught by the task's supervisor",
     BUS + "subscriber/mod.rs",
     "        let poll = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| this.task.poll(cx)));\n",
     "        let poll = Ok::<_, Box<dyn std::any::Any + Send>>(this.task.poll(cx));\n",
     ({}, ["cargo", "test", "-q", "--workspace", "--test", "spans", "--", "--exact",
           "a_panic_outside_the_handler_is_reported_with_what_it_left"])),
    ("bus subscriber: a handler's error leaves the panic guard without its failure",
     BUS + "subscriber/task.rs",
     "            *failure = Some(Failure::Err(error));\n",
     "            drop(error);\n",
     plain("failures", "handler_errors_are_logged_counted_and_passed_over")),
    ("bus subscriber: a panic in a handler's future counts as a call that finished",
     BUS + "subscriber/task.rs",
     "        Err(panic) => Poll::Ready(Called::failed(failure, panic)),\n",
     "        Err(_) => Poll::Ready(Called::Done),\n",
     plain("failures", "handler_panics_are_logged_counted_and_passed_over")),
    ("bus subscriber: a thread counts as inside a subscriber after that subscriber's poll",
     BUS + "shared/current.rs",
     "        CURRENT.with(|c| c.set(self.0));\n",
     "",
     plain("suite",
           "close::a_publish_that_yielded_before_the_writer_is_refused_by_a_close_meanwhile")),
    ("bus subscriber: a subscriber's poll never records it as the running subscriber",
     BUS + "shared/current.rs",
     "        Self(CURRENT.with(|c| c.replace(Some(current))))\n",
     "        let _ = current;\n        Self(CURRENT.with(Cell::get))\n",
     plain("suite",
           "close::close_from_inside_a_handler_returns_and_drains_everything")),
    ("bus receipts: a subscriber that ended before the publish counts as one that missed it",
     BUS + "topic/publish.rs",
     "            .filter(|s| s.start <= position && !s.done.is_cancelled())\n",
     "            .filter(|s| s.start <= position)\n",
     plain("suite", "delivery::a_subscriber_gone_before_the_publish_is_not_counted")),
    ("bus subscriber: the stall timer is polled with the budget the handler used up",
     BUS + "subscriber/task.rs",
     "            if had_budget && !tokio::task::coop::has_budget_remaining() {\n",
     "            if false {\n",
     plain("suite",
           "backpressure::a_handler_that_spends_its_whole_budget_on_every_poll_is_still_timed_out")),
    ("links otel: an export carries no traceparent",
     LINK + "otel.rs",
     "        TraceContextPropagator::new().inject_context(&cx, &mut Setter(&mut set));\n",
     "        let _ = (cx, &mut set);\n",
     featured("otel", "one_trace_from_publisher_to_remote_handler_over_every_engine")),
    ("redis tls: the link's root certificate never reaches the client",
     REDIS + "link.rs",
     "                root_cert: Some(root.clone()),\n",
     "                root_cert: None,\n",
     featured("redis",
              "streams::tls_round_trips_through_a_tls_only_server_whose_certificate_is_verified")),
    ("ring: a waker registration that unwinds keeps the slot's lock",
     CORE + "atomic_waker.rs",
     "                let unlock = GiveBack(self);\n",
     "                let unlock = ();\n",
     plain("poll",
           "a_waker_that_panics_when_cloned_does_not_break_the_slot_for_the_next_reader")),
    ("ring: a dropped ring stops at the first value whose drop panics",
     CORE + "shared.rs",
     "    fn drop(&mut self) {\n        self.drop_all();\n    }\n",
     "    fn drop(&mut self) {}\n",
     plain("drops", "a_value_whose_drop_panics_does_not_leak_the_others")),
    ("bus: a batch that fills the ring exactly waits for more room",
     BUS + "topic/publish.rs",
     "                        None => return Ok(total),\n"
     "                    }\n"
     "                    continue;\n",
     "                        None => {}\n"
     "                    }\n"
     "                    continue;\n",
     plain("suite",
           "backpressure::a_batch_that_exactly_fills_the_room_returns_without_waiting")),
    ("bus: a topic handle's subscribe with a retry policy skips the timer check",
     BUS + "subscriber/mod.rs",
     "    runnable(&topic.state, &options)?;\n    if let Some(retry)",
     "    if let Some(retry)",
     plain("suite",
           "no_runtime::a_retry_policy_without_a_time_driver_panics_at_subscribe")),
    ("bus subscriber: a stall timeout past the clock's range overflows",
     BUS + "subscriber/task.rs",
     "        let Some(deadline) = tokio::time::Instant::now().checked_add(timeout) else {",
     "        let Some(deadline) = Some(tokio::time::Instant::now() + timeout) else {",
     plain("suite",
           "backpressure::a_stall_timeout_too_long_for_the_clock_never_fires")),
    ("links: a close's deadline overflows the clock",
     LINK + "engine.rs",
     "    start\n"
     "        .checked_add(timeout)\n"
     "        .unwrap_or_else(|| start + LONGEST_WAIT)\n",
     "    start + timeout + (LONGEST_WAIT - LONGEST_WAIT)\n",
     plain("links",
           "cases::a_close_with_an_unrepresentable_deadline_finishes")),
    ("links: a link's state leaves Closed when its connection comes back",
     LINK + "report.rs",
     "                (now != CLOSED).then_some(value)\n",
     "                Some(value)\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--features", "engine", "--lib", "--",
           "--exact", "report::tests::a_closed_state_stays_closed"])),
    ("links: a dropped link call keeps its claim on the topic",
     LINK + "engine.rs",
     "        if let Some(key) = self.key.take() {\n"
     "            self.claims.linked().remove(&key);\n"
     "        }\n",
     "        let _ = self.key.take();\n",
     plain("nats",
           "link::a_link_call_dropped_midway_leaves_the_topic_free_to_link_again")),
    ("nats import: a durable consumer reading another topic's subject is taken as ours",
     "crates/ringbus-nats/src/import.rs",
     "    if reads != subject {\n",
     "    if reads != subject && false {\n",
     plain("nats",
           "link::two_topics_with_one_consumer_name_are_an_error_not_a_shared_consumer")),
    ("bus: a handler of any bus may publish into a closed bus",
     BUS + "shared/bus.rs",
     "        current().is_some_and(|current| current.bus == std::ptr::from_ref(self) as usize)\n",
     "        current().is_some_and(|current| current.bus != 0)\n",
     plain("suite",
           "close::a_handler_of_another_bus_cannot_publish_into_a_closed_bus")),
    ("bus: making a topic does not wake close's look at the counts",
     BUS + "bus.rs",
     "        drop(patterns);\n        // A `quiescent` pass that saw the list of topics change is not idle, and waits for\n",
     "        drop(patterns);\n        #[cfg(any())]\n",
     plain("suite", "close::close_returns_while_topics_are_being_made")),
    ("bus time: a panic hook installed again (chained to the application's)",
     BUS + "time.rs",
     "    drop(tokio::time::sleep(Duration::ZERO));\n",
     "    let previous = std::panic::take_hook();\n"
     "    std::panic::set_hook(Box::new(move |info| previous(info)));\n"
     "    drop(tokio::time::sleep(Duration::ZERO));\n",
     plain("panic_hook", "the_bus_never_replaces_the_applications_panic_hook")),
    ("bus context: a deadline off-runtime is not refused",
     BUS + "context.rs",
     "        self.deadline.is_none() || crate::time::runtime_reachable()\n",
     "        true\n",
     plain("suite", "no_runtime::publish_with_a_deadline_off_runtime_is_no_runtime")),
    ("bus subscribe: a stall timeout's timer is first made in the subscriber's task",
     BUS + "subscriber/mod.rs",
     "    if timeout.is_some() || options.retry.is_some() {\n"
     "        crate::time::require_driver();\n"
     "    }\n",
     "",
     plain("suite", "no_runtime::a_stall_timeout_without_a_time_driver_panics_at_subscribe")),
    ("bus pattern: a topic being made lets go of the patterns before its insert",
     BUS + "bus.rs",
     "        let patterns = self.inner.patterns.read();\n",
     "        let patterns = self.inner.patterns.read().clone();\n",
     plain("suite", "patterns::topics_made_while_a_pattern_subscribes_are_all_followed")),
    ("bus pattern: unsubscribe does not cut the topics it follows",
     BUS + "pattern.rs",
     "            f.cut();\n",
     "            let _ = f;\n",
     plain("suite", "patterns::unsubscribe_cuts_every_topic_and_stops_following")),
    ("bus pattern: a new topic of another type is not checked against the patterns",
     BUS + "pattern.rs",
     "        if !p.carries(topic) {\n            return Err(p.mismatch(name, topic_type));\n",
     "        if false {\n            return Err(p.mismatch(name, topic_type));\n",
     plain("suite",
           "patterns::a_pattern_and_a_topic_of_another_type_are_an_error_where_they_meet")),
    ("nats pattern import: a message its topic refuses stops the import",
     NATS + "import.rs",
     "                    \"ringbus-nats: the local bus refused an import; the pattern import goes on\"\n"
     "                );\n",
     "                    \"ringbus-nats: the local bus refused an import; the pattern import goes on\"\n"
     "                );\n"
     "                break;\n",
     plain("nats", "link::a_pattern_import_brings_every_matching_topic_in")),
    ("bus pattern: the rings of matched topics are made holding the pattern list, waiting",
     BUS + "pattern.rs",
     "        for (_, topic, _) in matching()? {\n"
     "            sub.make_ring(&topic, true).transpose()?;\n"
     "        }\n"
     "        let list = patterns.write();\n"
     "        let matching = matching()?;\n"
     "        let mut made = Some(Ok(()));\n"
     "        for (_, topic, _) in &matching {\n"
     "            made = sub.make_ring(topic, false);\n",
     "        let list = patterns.write();\n"
     "        let matching = matching()?;\n"
     "        let mut made = Some(Ok(()));\n"
     "        for (_, topic, _) in &matching {\n"
     "            made = sub.make_ring(topic, true);\n",
     plain("suite", "idle::a_pattern_making_rings_and_a_publish_making_a_topic_do_not_wait_for_each_other")),
    ("bus observe: a topic being made raises its events holding the registry",
     BUS + "bus.rs",
     "        let _held = observe::Held::enter();\n",
     "",
     plain("reentrant", "a_tracing_layer_that_makes_topics_does_not_hang_the_bus")),
    ("bus observe: a pattern subscribing raises its followers' events holding its list",
     BUS + "pattern.rs",
     "    let _held = observe::Held::enter();\n",
     "",
     plain("reentrant", "a_tracing_layer_that_makes_topics_does_not_hang_the_bus")),
    ("bus pattern: leaving drops the pattern's handler holding the list",
     BUS + "pattern.rs",
     "            drop(patterns.remove(self.id));\n",
     "            patterns.write().retain(|p| p.shared().id != self.id);\n",
     plain("reentrant", "a_tracing_layer_that_makes_topics_does_not_hang_the_bus")),
    ("bus publish: an unbuffered publish to an idle topic marks the writer parked",
     BUS + "topic/publish.rs",
     "        // Without a ring nobody handles the message; and only a ring's writer parks (see\n"
     "        // `wait_room_untimed`).\n"
     "        if guard.open().is_none() {\n"
     "            return;\n"
     "        }\n",
     "",
     plain("suite", "idle::an_unbuffered_idle_topic_never_looks_parked")),
    ("bus pattern: a batch follower hands its handler a fresh copy of the topic's name",
     BUS + "pattern.rs",
     "        self.handler.0.call(&self.topic, batch)\n",
     "        let topic: &'a str = String::leak(self.topic.to_string());\n"
     "        self.handler.0.call(topic, batch)\n",
     plain("alloc_bus", "a_pattern_batch_subscribers_deliveries_allocate_nothing")),
    ("bus subscriber: a batch takes everything ready, unpaid past its first unit",
     BUS + "subscriber/task.rs",
     "        limit.min(coop::PER_UNIT + coop::pay_for(cx, more))\n",
     "        let _ = (more, cx);\n        limit\n",
     plain("suite", "neighbour::a_pattern_batch_subscriber_lets_its_neighbours_run")),
    ("bus pattern: a follower hands its handler a fresh copy of the topic's name",
     BUS + "pattern.rs",
     "        self.handler.0.call(&self.topic, msg)\n",
     "        let topic: &'a str = String::leak(self.topic.to_string());\n"
     "        self.handler.0.call(topic, msg)\n",
     plain("alloc_bus", "a_pattern_subscribers_deliveries_allocate_nothing")),
    ("nats pattern import: the topic keeps the subject's last prefix byte",
     NATS + "import.rs",
     "    let prefix_len = subject.len() - pattern.len();\n",
     "    let prefix_len = subject.len() - pattern.len() - 1;\n",
     plain("links", "cases::patterns_carry_each_matching_topic_in_order")),
    ("bus pattern: a batch pattern takes a retry policy it cannot honour",
     BUS + "bus.rs",
     "        subscriber::batch_options(&options)?;\n",
     "",
     plain("suite", "patterns::a_pattern_batch_subscriber_gets_each_topics_batches_in_order")),
    ("links: a pattern may be linked over a name it covers (a topic linked twice)",
     LINK + "engine.rs",
     "            (Some(old), Some(new)) => old.overlaps(new),\n",
     "            (Some(old), Some(new)) => old.as_str() == new.as_str(),\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus-link", "--all-features", "--lib", "--",
           "--exact", "engine::tests::a_name_and_a_pattern_sharing_a_topic_are_not_both_linked"])),
    ("nats pattern export: a topic goes to the subject of the pattern's first match",
     NATS + "export.rs",
     "            match crate::subject::subject(&self.link.prefix, topic) {\n",
     "            match crate::subject::subject(&self.link.prefix, \"orders.eu\") {\n",
     plain("nats", "link::a_pattern_export_sends_every_matching_topic_out")),
    ("bus pattern: the bus's list and a pattern keep each other alive",
     BUS + "pattern.rs",
     "    list.push(sub.clone());\n",
     "    list.push(sub.clone());\n    std::mem::forget(shared.clone());\n",
     plain("suite", "patterns::a_dropped_bus_drops_its_patterns_and_their_messages")),
    ("bus pattern: a topic refusing a follower leaves the pattern half subscribed",
     BUS + "pattern.rs",
     "        if let Err(error) = sub.follow(topic) {\n"
     "            drop(shared.stop());\n"
     "            return Err(error);\n"
     "        }\n",
     "        let _ = sub.follow(topic);\n",
     plain("suite", "patterns::a_pattern_that_cannot_follow_every_topic_is_refused_whole")),
    ("bus pattern: unsubscribe from its own handler waits for the other topics",
     BUS + "subscriber/mod.rs",
     "                if inside {\n",
     "                if inside && false {\n",
     plain("suite", "patterns::unsubscribing_a_pattern_from_its_own_handler_returns")),
    ("bus pattern: a wildcard name is made into a topic",
     BUS + "bus.rs",
     "        if pattern::is_pattern(name) {\n            return Err(Unresolved::WildcardTopic(",
     "        if false {\n            return Err(Unresolved::WildcardTopic(",
     plain("suite", "patterns::patterns_and_names_are_not_mixed_up")),
    ("nats jetstream pattern import: each message's topic loses its first letter",
     NATS + "import.rs",
     "        self.pattern_prefix.and_then(|n| message.subject.get(n..))\n",
     "        self.pattern_prefix.and_then(|n| message.subject.get(n + 1..))\n",
     plain("nats", "link::patterns_travel_over_jetstream_at_least_once")),
    ("nats jetstream pattern import: a dead letter goes under the pattern, not its topic",
     NATS + "import.rs",
     "        dead_letter(&self.link, self.local_topic(message), message, reason).await\n",
     "        dead_letter(&self.link, &self.topic, message, reason).await\n",
     plain("nats", "link::patterns_travel_over_jetstream_at_least_once")),
    ("nats stream: a pattern's subjects are added beside the subjects they cover",
     NATS + "shared.rs",
     "            .partition(|s| missing.iter().any(|w| covers(w, s)));\n",
     "            .partition(|_| false);\n",
     plain("nats", "link::patterns_travel_over_jetstream_at_least_once")),
    ("bus pattern: `*` covers `>`",
     BUS + "pattern.rs",
     "                (Some(\"*\"), Some(y)) if y != \">\" => {}\n",
     "                (Some(\"*\"), Some(_)) => {}\n",
     ({}, ["cargo", "test", "-q", "-p", "ringbus", "--lib", "--", "--exact",
           "pattern::tests::covering_takes_every_name_the_other_matches"])),
    ("nats jetstream pattern import: a shared import's consumer is named by the instance",
     NATS + "import.rs",
     "            let durable = crate::subject::durable_name(&[owner, \"pattern\", &spelled]);\n",
     "            let durable = crate::subject::durable_name(&[&link.js.durable, \"pattern\", &spelled]);\n"
     "            let _ = owner;\n",
     plain("nats", "sharing::shared_imports_give_each_message_to_one_instance")),
    ("nats stream: a stream made beforehand is never given the dead letters' subject",
     NATS + "shared.rs",
     "        let dead_elsewhere = self.held_elsewhere(&dead).await;\n",
     "        let dead_elsewhere = true;\n",
     plain("nats", "link::patterns_travel_over_jetstream_at_least_once")),
    ("nats stream: the dead letters' subject is added beside an operator's stream that holds them",
     NATS + "shared.rs",
     "                .any(|s| covers(s, subject)),\n",
     "                .any(|_| false),\n",
     plain("nats", "link::a_stream_whose_wildcard_covers_the_topic_is_used_as_it_is")),
    ("bus: a close does not wake a parked unbuffered publish",
     BUS + "bus.rs",
     "        for topic in self.topics() {\n            topic.wake_writer();\n        }\n",
     "",
     plain("suite", "subscribe::a_close_ends_an_unbuffered_publish_waiting_for_its_handling")),
    ("ring: waking the writer through a stage wakes nobody",
     CORE + "stage.rs",
     "        self.shared.writer_waker.wake();\n",
     "        let _ = &self.shared;\n",
     loom("ringbus-core", "loom_tests::loom_a_woken_writer_sees_the_flag_set_before_the_wake")),
    ("nats stream: a refused export leaves its subject in the stream",
     NATS + "export.rs",
     "            if let Some(change) = change {\n                change.undo().await;\n            }\n",
     "",
     plain("nats", "link::a_refused_export_leaves_the_stream_as_it_was")),
    ("nats stream: a stream a refused export made keeps the export's subject",
     NATS + "shared.rs",
     "            replaced: created.then(Vec::new),\n",
     "            replaced: created.then(Vec::new).filter(|_| false),\n",
     plain("nats", "link::a_refused_export_leaves_the_stream_as_it_was")),
    ("nats stream: a refused import leaves its subject in the stream",
     NATS + "import.rs",
     "            change.undo().await;\n",
     "            drop(change);\n",
     plain("nats", "link::two_topics_with_one_consumer_name_are_an_error_not_a_shared_consumer")),
    ("nats export: an unacked export is sent again to another subject",
     NATS + "export.rs",
     "        let result = match publish_js(link, &subject, &topic, &message, sent).await {\n",
     "        let subject = Subject::from(format!(\"{subject}.again\"));\n"
     "        let result = match publish_js(link, &subject, &topic, &message, sent).await {\n",
     plain("nats", "link::a_pattern_exports_resends_go_to_each_messages_own_subject")),
    ("nats export: a re-sent export names another topic",
     NATS + "export.rs",
     "        let result = match publish_js(link, &subject, &topic, &message, sent).await {\n",
     "        let result = match publish_js(link, &subject, \"orders.other\", &message, sent).await {\n",
     plain("nats", "link::a_pattern_exports_resends_go_to_each_messages_own_subject")),
    ("nats export: an export never acked is re-sent forever",
     NATS + "export.rs",
     "        if sent.elapsed() >= link.js.publish_retry_for {\n",
     "        if false && sent.elapsed() >= link.js.publish_retry_for {\n",
     plain("nats", "link::an_export_never_acked_is_given_up_after_publish_retry_for")),
    ("link import: a message found ready after the first is dropped (nats's test)",
     LINK + "import.rs",
     "            Some(ready) => next = ready,\n",
     "            Some(_) => return (taken, Stands::Open),\n",
     plain("nats", "link::patterns_travel_over_jetstream_at_least_once")),
    ("link import: a message found ready after the first is dropped (rabbitmq's test)",
     LINK + "import.rs",
     "            Some(ready) => next = ready,\n",
     "            Some(_) => return (taken, Stands::Open),\n",
     plain("links", "cases::order_with_one_subscriber_and_no_loss_right_after_linking")),
]


def split(cmd):
    """The cargo half of a check's command and the arguments of its test binary."""
    cut = cmd.index("--")
    return cmd[:cut], cmd[cut + 1:]


class Built:
    """A check's test binary, copied out of the target directory so that the next plant's
    build can overwrite the original while this one runs."""

    def __init__(self, exe, package_dir, args, env, alone):
        self.exe, self.package_dir, self.args, self.env = exe, package_dir, args, env
        # A package with binaries of its own (worker processes its tests spawn) runs its
        # check before the next build starts, which could relink those binaries under it.
        self.alone = alone

    def run(self):
        """Runs the test binary as `cargo test` would (from its package's directory); returns
        (failed, stdout). A check still running after TIMEOUT seconds counts as failed."""
        env = {**self.env, "CARGO_MANIFEST_DIR": self.package_dir}
        try:
            run = subprocess.run([self.exe, *self.args], cwd=self.package_dir, env=env,
                                 capture_output=True, text=True, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            return True, "timed out"
        return run.returncode != 0, run.stdout


def build(check, scratch, bins, env_base):
    """Builds a check's test binary in the scratch copy. Returns a `Built`, or the compiler's
    stderr if the build failed."""
    extra, cmd = check
    cargo, args = split(cmd)
    env = {**env_base, **extra}
    env["CARGO_TARGET_DIR"] = env_base["PLANT_TARGET_LOOM" if "RUSTFLAGS" in extra else
                                      "PLANT_TARGET"]
    run = subprocess.run([*cargo, "--no-run", "--message-format=json-render-diagnostics"],
                         cwd=scratch, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if run.returncode != 0:
        return run.stderr
    artifacts = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    artifacts = [a for a in artifacts
                 if a.get("reason") == "compiler-artifact" and a.get("executable")]
    tests = [a for a in artifacts if a["profile"]["test"]]
    assert len(tests) == 1, f"{cmd}: expected one test binary, cargo built {len(tests)}"
    package_dir = os.path.dirname(tests[0]["manifest_path"])
    alone = any(not a["profile"]["test"] and os.path.dirname(a["manifest_path"]) == package_dir
                for a in artifacts)
    # A name no other copy has had: a copy whose check has not run yet must not be replaced.
    copy = os.path.join(bins, f"{next(COPIES)}-{os.path.basename(tests[0]['executable'])}")
    shutil.copy2(tests[0]["executable"], copy)
    return Built(copy, package_dir, args, env, alone)


def main():
    # --no-baseline: the checks are not first run on the unchanged code, because the caller has
    # just run every one of them there (CI's test steps run every test these checks name, on
    # the same code and builds). A plant's check must then fail with a test that ran, not
    # by running none.
    baseline = "--no-baseline" not in sys.argv[1:]
    words = [w for w in sys.argv[1:] if w != "--no-baseline"]
    bugs = [b for b in BUGS if not words or any(w in b[0] for w in words)]
    repo = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True,
                          text=True, check=True).stdout.strip()
    scratch = os.environ.get("PLANT_BUGS_DIR") or tempfile.mkdtemp(prefix="ringbus-bugs-")
    files = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True,
                           check=True).stdout.split()
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(scratch, f)) or scratch, exist_ok=True)
        # copy2 keeps each file's modification time: with the same target directory, cargo
        # then finds what the repository's own build made fresh, and rebuilds only a crate
        # whose file a plant changed.
        shutil.copy2(os.path.join(repo, f), os.path.join(scratch, f))
    bins = os.path.join(scratch, "target-plant-bins")
    os.makedirs(bins, exist_ok=True)
    # The repository's own target directories (or CARGO_TARGET_DIR and the same with -loom).
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(repo, "target")
    env_base = {**os.environ, "PLANT_TARGET": target, "PLANT_TARGET_LOOM": target + "-loom",
                # Each plant changes one file: an incremental build reuses the rest of its crate.
                "CARGO_INCREMENTAL": "1"}
    print(f"scratch copy: {scratch} (targets: {env_base['PLANT_TARGET']}, "
          f"{env_base['PLANT_TARGET_LOOM']})", flush=True)
    started_all = time.time()
    runners = ThreadPoolExecutor(max_workers=1)
    missed, pending = [], []

    def report(job, line):
        print(line, flush=True)
        if job:
            missed.append(job)

    # First, each check on the unchanged code: it must pass there, or its failure with a bug
    # planted would prove nothing.
    for check in {tuple(map(str, c[1])): c for *_, c in bugs}.values() if baseline else []:
        test = check[1][-1]
        built = build(check, scratch, bins, env_base)
        if isinstance(built, str):
            report(f"{test} (does not build on the unchanged code)",
                   f"FAILS   without a bug: {test} (build)\n{built[-3000:]}")
            continue

        def baseline(built=built, test=test):
            failed, out = built.run()
            ok = not failed and " 1 passed" in out
            report(None if ok else f"{test} (fails, or runs no test, on the unchanged code)",
                   f"{'passes' if ok else 'FAILS':7} without a bug: {test}")
        pending.append(runners.submit(baseline))
        if built.alone:
            pending[-1].result()
    planted = set()
    for name, path, find, replace, check in bugs:
        target = os.path.join(scratch, path)
        with open(target) as fh:
            original = fh.read()
        if original.count(find) != 1:
            report(name, f"STALE   {name}: the text to change is not in {path} exactly once")
            continue
        planted.add(path)
        started = time.time()
        with open(target, "w") as fh:
            fh.write(original.replace(find, replace))
        try:
            built = build(check, scratch, bins, env_base)
        except subprocess.TimeoutExpired:
            built = "the build timed out"
        finally:
            with open(target, "w") as fh:
                fh.write(original)
        if isinstance(built, str):
            # The planted change did not compile: fix the list.
            report(name, f"BROKEN  {name}\n{built[-3000:]}")
            continue
        build_time = time.time() - started

        def verdict(built=built, name=name, build_time=build_time):
            started = time.time()
            failed, out = built.run()
            os.remove(built.exe)
            # A check that fails must have run its one test (or hung), not failed before it.
            failed = failed and (out == "timed out" or "running 1 test" in out)
            report(None if failed else name,
                   f"{'caught' if failed else 'MISSED':7} {name} "
                   f"(build {build_time:.0f} s, check {time.time() - started:.0f} s)")
        pending.append(runners.submit(verdict))
        if built.alone:
            pending[-1].result()
    for job in pending:
        job.result()
    runners.shutdown()
    # The target directories now hold what the last plant built. Touch each planted file in
    # the repository so that its next build recompiles those crates instead of taking a
    # planted build for a fresh one.
    for path in planted:
        os.utime(os.path.join(repo, path))
    if "PLANT_BUGS_DIR" not in os.environ:
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.time() - started_all
    if missed:
        print(f"{len(missed)} of {len(bugs)} checks did not hold ({elapsed:.0f} s):", *missed,
              sep="\n  ")
        sys.exit(1)
    print(f"all {len(bugs)} planted bugs were caught ({elapsed:.0f} s)")


if __name__ == "__main__":
    main()
