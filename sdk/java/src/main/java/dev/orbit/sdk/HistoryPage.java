package dev.orbit.sdk;

import java.util.List;

/** One page of history; {@code nextAfterSeq} is null on the last. */
public record HistoryPage(List<HistoryEvent> events, Long nextAfterSeq) {}
