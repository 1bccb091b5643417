package io.idem;

import java.time.Duration;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How often a call that met a transient fault is made again, and how long to wait in
 * between: full-jitter exponential backoff, a random delay in
 * [0, min(maxDelay, baseDelay·2^(n-1))) before the n-th retry.
 *
 * @param maxAttempts attempts in all, the first included; below 1 means 1
 * @param baseDelay the cap of the first retry's delay
 * @param maxDelay the cap of every delay
 */
public record Retry(int maxAttempts, Duration baseDelay, Duration maxDelay) {
  /** 8 attempts, delays capped at 10 ms, 20 ms, ... up to 1 s. */
  public static final Retry DEFAULT = new Retry(8, Duration.ofMillis(10), Duration.ofSeconds(1));

  /** One attempt, no retry. */
  public static final Retry NONE = new Retry(1, Duration.ZERO, Duration.ZERO);

  public Retry {
    if (baseDelay == null || maxDelay == null || baseDelay.isNegative() || maxDelay.isNegative()) {
      throw new IllegalArgumentException("Retry: baseDelay and maxDelay must be durations >= 0");
    }
  }

  /** The attempts in all (at least 1). */
  public int attempts() { return Math.max(1, maxAttempts); }

  /** The wait before retry n (n >= 1): full jitter under the exponential cap. */
  public Duration delay(int n) {
    long base = baseDelay.toNanos();
    if (base <= 0 || n < 1) {
      return Duration.ZERO;
    }
    long max = maxDelay.toNanos();
    long limit = base;
    for (int i = 1; i < n && (max <= 0 || limit < max) && limit < Long.MAX_VALUE / 2; i++) {
      limit *= 2;
    }
    if (max > 0 && limit > max) {
      limit = max;
    }
    return Duration.ofNanos(ThreadLocalRandom.current().nextLong(limit));
  }

  /** Sleeps delay(n); an interrupt ends the wait and stays set. */
  boolean sleep(int n) {
    Duration d = delay(n);
    if (d.isZero()) {
      return !Thread.currentThread().isInterrupted();
    }
    try {
      Thread.sleep(d.toMillis(), (int) (d.toNanos() % 1_000_000));
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }
}
