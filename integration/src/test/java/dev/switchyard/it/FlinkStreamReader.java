package dev.switchyard.it;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Queue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import org.apache.celeborn.common.network.protocol.BacklogAnnouncement;
import org.apache.celeborn.common.network.protocol.BufferStreamEnd;
import org.apache.celeborn.common.network.protocol.ReadData;
import org.apache.celeborn.common.network.protocol.RequestMessage;
import org.apache.celeborn.common.network.protocol.TransportableError;
import org.apache.celeborn.common.protocol.PbReadAddCredit;
import org.apache.celeborn.shaded.io.netty.buffer.ByteBuf;
import org.apache.celeborn.shaded.io.netty.buffer.Unpooled;

/**
 * One reader of a map partition's sub-partition range, after Celeborn's Flink {@code
 * RemoteBufferStreamReader} (0.5.4), with the credit accounting of its {@code TransferBufferPool}
 * and {@code CreditListener}:
 *
 * <ul>
 *   <li>{@link #open}: {@code readBufferedPartition} (GetReducerFileGroup from the
 *       LifecycleManager, then OPEN_STREAM with the initial credit);
 *   <li>a BACKLOG_ANNOUNCEMENT reserves that many buffers of the pool, and every buffer reserved
 *       is granted to the worker as credit (READ_ADD_CREDIT); buffers recycled later go to readers
 *       still short of buffers, at least 2 at a time (TransferBufferPool's MIN_CREDITS_TO_NOTIFY);
 *   <li>a READ_DATA body is copied into a buffer of the pool (its size is the handshake's
 *       bufferSize); one that arrives without a credit for it is a protocol violation;
 *   <li>BUFFER_STREAM_END from the worker moves the stream to the next location (epoch) and
 *       closes the ended one (the client then sends BUFFER_STREAM_END itself);
 *   <li>a TRANSPORTABLE_ERROR (or a lost connection) fails the reader.
 * </ul>
 *
 * <p>Upstream opens with initial credit 0 and lives on backlog announcements ({@link
 * CreditMode#POOL}). For the tests there are two more modes: {@link CreditMode#PER_CONSUMED} (an
 * initial credit, then one credit back per buffer consumed, backlog ignored) and {@link
 * CreditMode#MANUAL} (only {@link #grant}). Every message becomes an {@link Event} in {@link
 * #events()}; the test thread consumes them and calls {@link #consumed} for each data buffer.
 */
public class FlinkStreamReader {

  public enum CreditMode {
    POOL,
    PER_CONSUMED,
    MANUAL
  }

  public enum Kind {
    DATA,
    END,
    ERROR
  }

  /** What arrived, in order. {@code data} for DATA, {@code error} for ERROR. */
  public record Event(Kind kind, long streamId, byte[] data, String error, long nanos) {}

  /**
   * TransferBufferPool, counting buffers instead of holding them (the buffer a READ_DATA body is
   * copied into is released by the transport once it is handled, so the pool hands out fresh ones).
   */
  public static final class CreditPool {
    static final int MIN_CREDITS_TO_NOTIFY = 2;
    private final int bufferSize;
    private int buffers;
    private int numAvailableBuffers;
    private final Queue<FlinkStreamReader> listeners = new ArrayDeque<>();

    public CreditPool(int numBuffers, int bufferSize) {
      this.buffers = numBuffers;
      this.numAvailableBuffers = numBuffers;
      this.bufferSize = bufferSize;
    }

    synchronized boolean requestBuffer() {
      if (buffers == 0) {
        return false;
      }
      buffers--;
      return true;
    }

    void reserveBuffers(FlinkStreamReader listener, int numRequiredBuffers) {
      int numCredits;
      synchronized (this) {
        if (numRequiredBuffers > numAvailableBuffers) {
          listener.numCreditsNeeded += numRequiredBuffers - numAvailableBuffers;
        }
        if (!listener.isRegistered && listener.numCreditsNeeded > 0) {
          listeners.add(listener);
          listener.isRegistered = true;
        }
        numCredits = Math.min(numAvailableBuffers, numRequiredBuffers);
        if (numCredits > 0) {
          numAvailableBuffers -= numCredits;
        }
      }
      if (numCredits > 0) {
        listener.notifyAvailableCredits(numCredits);
      }
    }

    void recycle() {
      List<Object[]> assignments;
      synchronized (this) {
        buffers++;
        numAvailableBuffers++;
        assignments = dispatchReservedCredits();
      }
      for (Object[] a : assignments) {
        ((FlinkStreamReader) a[0]).notifyAvailableCredits((Integer) a[1]);
      }
    }

    private List<Object[]> dispatchReservedCredits() {
      if (numAvailableBuffers < MIN_CREDITS_TO_NOTIFY || listeners.isEmpty()) {
        return Collections.emptyList();
      }
      List<Object[]> out = new ArrayList<>();
      while (numAvailableBuffers > 0 && !listeners.isEmpty()) {
        FlinkStreamReader l = listeners.poll();
        int n = Math.min(l.numCreditsNeeded, numAvailableBuffers);
        if (n > 0) {
          l.numCreditsNeeded -= n;
          numAvailableBuffers -= n;
        }
        if (l.numCreditsNeeded > 0) {
          listeners.add(l);
        } else {
          l.isRegistered = false;
        }
        if (n > 0) {
          out.add(new Object[] {l, n});
        }
      }
      return out;
    }

    public synchronized String state() {
      return "pool{buffers " + buffers + ", unreserved " + numAvailableBuffers + ", waiting readers "
          + listeners.size() + "}";
    }
  }

  private final FlinkDriverClient client;
  private final int shuffleId;
  private final int partitionId;
  private final int subStart;
  private final int subEnd;
  private final int bufferSize;
  private final CreditMode mode;
  private final CreditPool pool;
  private final String name;
  private final LinkedBlockingQueue<Event> events = new LinkedBlockingQueue<>();
  private volatile FlinkBufferStream bufferStream;
  private volatile boolean closed;
  // CreditListener state, guarded by the pool's lock
  int numCreditsNeeded;
  boolean isRegistered;
  // accounting
  private final AtomicLong granted = new AtomicLong();
  private final AtomicLong received = new AtomicLong();
  private final AtomicInteger backlogs = new AtomicInteger();
  private final AtomicLong backlogTotal = new AtomicLong();
  private final List<String> violations = Collections.synchronizedList(new ArrayList<>());
  private final List<Long> streamIds = Collections.synchronizedList(new ArrayList<>());

  public FlinkStreamReader(String name, FlinkDriverClient client, int shuffleId, int partitionId, int subStart,
      int subEnd, int bufferSize, CreditMode mode, CreditPool pool) {
    if ((mode == CreditMode.POOL) != (pool != null)) {
      throw new IllegalArgumentException("a pool goes with CreditMode.POOL only");
    }
    this.name = name;
    this.client = client;
    this.shuffleId = shuffleId;
    this.partitionId = partitionId;
    this.subStart = subStart;
    this.subEnd = subEnd;
    this.bufferSize = bufferSize;
    this.mode = mode;
    this.pool = pool;
  }

  public String name() {
    return name;
  }

  /** RemoteBufferStreamReader.open: any failure becomes an ERROR event. */
  public void open(int initialCredit) {
    granted.addAndGet(initialCredit);
    Consumer<RequestMessage> messageConsumer = this::onMessage;
    try {
      bufferStream = client.readBufferedPartition(shuffleId, partitionId, subStart, subEnd);
      bufferStream.onOpened(streamIds::add);
      bufferStream.open(this::requestBuffer, initialCredit, messageConsumer);
    } catch (Exception e) {
      messageConsumer.accept(new TransportableError(0L, e));
    }
  }

  /** For bad-input tests: a stream on a location that the LifecycleManager did not hand out. */
  public void openOn(String shuffleKey, org.apache.celeborn.common.protocol.PartitionLocation location,
      int initialCredit) {
    granted.addAndGet(initialCredit);
    bufferStream = FlinkBufferStream.create(client, client.readClientFactory(), shuffleKey,
        new org.apache.celeborn.common.protocol.PartitionLocation[] {location}, subStart, subEnd);
    bufferStream.onOpened(streamIds::add);
    bufferStream.open(this::requestBuffer, initialCredit, this::onMessage);
  }

  private void onMessage(RequestMessage m) {
    if (m instanceof ReadData rd) {
      byte[] bytes;
      try {
        java.nio.ByteBuffer nio = rd.body().nioByteBuffer();
        bytes = new byte[nio.remaining()];
        nio.get(bytes);
      } catch (java.io.IOException e) {
        throw new java.io.UncheckedIOException(e);
      }
      events.add(new Event(Kind.DATA, rd.getStreamId(), bytes, null, System.nanoTime()));
    } else if (m instanceof BacklogAnnouncement b) {
      backlogs.incrementAndGet();
      backlogTotal.addAndGet(b.getBacklog());
      if (!closed && mode == CreditMode.POOL) {
        pool.reserveBuffers(this, b.getBacklog());
      }
    } else if (m instanceof TransportableError e) {
      // RemoteBufferStreamReader.errorReceived
      closed = true;
      events.add(new Event(Kind.ERROR, e.getStreamId(), null, e.getErrorMessage(), System.nanoTime()));
    } else if (m instanceof BufferStreamEnd end) {
      // RemoteBufferStreamReader.onStreamEnd (before the event is queued, so that the consumer
      // sees whether another location was opened)
      bufferStream.moveToNextPartitionIfPossible(end.getStreamId());
      events.add(new Event(Kind.END, end.getStreamId(), null, null, System.nanoTime()));
    }
  }

  /** The buffer supplier the frame decoder copies a READ_DATA body into. */
  private ByteBuf requestBuffer() {
    long n = received.incrementAndGet();
    long g = granted.get();
    if (n > g) {
      violations.add(String.format("ReadData #%d arrived with only %d credits granted", n, g));
    }
    if (pool != null && !pool.requestBuffer()) {
      violations.add(String.format("ReadData #%d arrived while every buffer of the pool was in use (%s)", n,
          pool.state()));
    }
    return Unpooled.buffer(bufferSize, bufferSize);
  }

  /** CreditListener.notifyAvailableCredits: READ_ADD_CREDIT unless closed. */
  void notifyAvailableCredits(int numCredits) {
    if (!closed) {
      granted.addAndGet(numCredits);
      bufferStream.addCredit(
          PbReadAddCredit.newBuilder().setStreamId(bufferStream.getStreamId()).setCredit(numCredits).build());
    }
  }

  /** Grants credit explicitly (MANUAL mode, or extra credit in any mode). */
  public void grant(int credits) {
    notifyAvailableCredits(credits);
  }

  /** The test consumed a DATA event: its buffer goes back (POOL) or one credit goes back (PER_CONSUMED). */
  public void consumed() {
    if (mode == CreditMode.POOL) {
      pool.recycle();
    } else if (mode == CreditMode.PER_CONSUMED) {
      notifyAvailableCredits(1);
    }
  }

  /** RemoteBufferStreamReader.close: BUFFER_STREAM_END to the worker for the current stream. */
  public void close() {
    closed = true;
    if (bufferStream != null) {
      bufferStream.close();
    }
  }

  public LinkedBlockingQueue<Event> events() {
    return events;
  }

  public FlinkBufferStream bufferStream() {
    return bufferStream;
  }

  public long granted() {
    return granted.get();
  }

  public long received() {
    return received.get();
  }

  public int backlogs() {
    return backlogs.get();
  }

  public long backlogTotal() {
    return backlogTotal.get();
  }

  public List<String> violations() {
    synchronized (violations) {
      return new ArrayList<>(violations);
    }
  }

  public List<Long> streamIds() {
    synchronized (streamIds) {
      return new ArrayList<>(streamIds);
    }
  }

  public int subStart() {
    return subStart;
  }

  public int subEnd() {
    return subEnd;
  }

  public int partitionId() {
    return partitionId;
  }
}
