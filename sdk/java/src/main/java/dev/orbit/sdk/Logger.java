package dev.orbit.sdk;

import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;

/**
 * Receives the worker's log lines: a level (DEBUG, INFO, WARN, ERROR) and a message such as
 * {@code orbit worker registered worker_id=… runtime=java tasks=8 session_id=…}.
 */
@FunctionalInterface
public interface Logger {
  void log(String level, String message);

  DateTimeFormatter TIME = DateTimeFormatter.ofPattern("yyyy/MM/dd HH:mm:ss.SSSSSS");

  /** A line of the default logger: a timestamp, the level and the message. */
  static String line(String level, String message) {
    return LocalDateTime.now().format(TIME) + " " + level + " " + message;
  }

  /** The default: one line on standard error, with a timestamp. */
  static Logger stderr() {
    return (level, message) -> {
      String line = line(level, message);
      synchronized (System.err) {
        System.err.println(line);
        System.err.flush();
      }
    };
  }
}
