package dev.switchyard.it;

import java.util.List;

/**
 * A real service behind Switchyard's cold tier in the cold-tier tests: the TOML that points
 * {@code [storage.cold]} at it, and a listing of what one run left there, read from the service's
 * side (not through Switchyard).
 */
interface ColdStore extends AutoCloseable {

  /** "s3" or "hdfs". */
  String label();

  /**
   * The {@code [storage.cold]} table for a run called {@code run} (a name of letters, digits and
   * dashes): each run gets its own key prefix or directory, listed by {@link #list}.
   */
  String coldToml(String run, String hugePartitionThreshold);

  /** The objects (files) of run {@code run} now. */
  Listing list(String run);

  /** Throws if the helper process has died. */
  void assertAlive();

  @Override
  void close();

  /** Objects under a run's prefix: how many, their total size, and a few of their names. */
  record Listing(int objects, long bytes, List<String> sample) {
    static final int SAMPLE = 5;
  }
}
