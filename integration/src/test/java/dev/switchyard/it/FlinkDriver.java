package dev.switchyard.it;

import java.io.IOException;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.celeborn.client.LifecycleManager;
import org.apache.celeborn.client.ShuffleClientImpl.ReduceFileGroups;
import org.apache.celeborn.common.CelebornConf;
import org.apache.celeborn.common.protocol.PartitionLocation;
import org.apache.celeborn.shaded.io.netty.buffer.ByteBuf;

/**
 * A Flink batch job's shuffle, driven through the real Celeborn 0.5.4 client classes against a
 * Celeborn master and worker, without Flink: the JobManager side ({@code RemoteShuffleMaster}:
 * one {@link LifecycleManager} per application, with {@code
 * celeborn.client.checked.useAllocatedWorkers=true} as the plugin sets it, and {@code
 * ShuffleTaskInfo}'s shuffle / attempt / partition ids), map tasks ({@link FlinkOutputGate}) and
 * readers ({@link FlinkStreamReader}) on "TaskManagers" ({@link FlinkDriverClient}).
 *
 * <p>{@link Dataset} is the data: {@code numMappers} map tasks, each writing {@code numRegions}
 * regions to {@code numSubs} sub-partitions and then the broadcast region that carries Flink's
 * EndOfPartition event (as {@code ResultPartition.finish} does). Every Flink buffer's bytes
 * encode (map, region, sub-partition, sequence) and a pseudo-random payload; some regions are
 * broadcast (written once to sub-partition 0, which is what the Flink plugin does, and read by
 * every sub-partition). What each map task actually pushed (16-byte header included) is recorded,
 * and {@link #expected} derives the exact sequence of READ_DATA bodies a reader of a
 * sub-partition range must receive: regions in order, within a region the sub-partitions of the
 * range ascending, for a broadcast region sub-partition 0's records once per sub-partition of the
 * range (the worker's index gives every sub-partition of a broadcast region the same entry).
 */
public final class FlinkDriver implements AutoCloseable {

  static final DateTimeFormatter TIME = DateTimeFormatter.ofPattern("HH:mm:ss.SSS");

  static void log(String fmt, Object... args) {
    System.out.println("[flink-driver " + LocalTime.now().format(TIME) + "] " + String.format(fmt, args));
  }

  /**
   * Client settings: what a Flink job's {@code celeborn.*} keys would carry, with the fail-fast
   * values of the Spark tests (see README), so a broken server fails a test within a minute.
   */
  public static CelebornConf conf(String masterEndpoint) {
    return conf(masterEndpoint, false);
  }

  /** As {@link #conf(String)}, with {@code celeborn.auth.enabled} as given. */
  public static CelebornConf conf(String masterEndpoint, boolean auth) {
    CelebornConf c = new CelebornConf();
    c.set("celeborn.auth.enabled", String.valueOf(auth));
    c.set("celeborn.master.endpoints", masterEndpoint);
    // RemoteShuffleMaster: set if missing
    c.set("celeborn.client.checked.useAllocatedWorkers", "true");
    // Flink does not support replication (RemoteShuffleMaster fails the job if it is on)
    c.set("celeborn.client.push.replicate.enabled", "false");
    c.set("celeborn.network.connect.timeout", "5s");
    c.set("celeborn.network.timeout", "60s");
    c.set("celeborn.rpc.askTimeout", "30s");
    c.set("celeborn.rpc.lookupTimeout", "10s");
    c.set("celeborn.masterClient.rpc.askTimeout", "20s");
    c.set("celeborn.masterClient.maxRetries", "3");
    c.set("celeborn.client.rpc.maxRetries", "2");
    c.set("celeborn.client.registerShuffle.maxRetries", "2");
    c.set("celeborn.client.registerShuffle.retryWait", "1s");
    c.set("celeborn.client.reserveSlots.maxRetries", "2");
    c.set("celeborn.client.reserveSlots.retryWait", "1s");
    c.set("celeborn.client.requestCommitFiles.maxRetries", "2");
    c.set("celeborn.client.rpc.getReducerFileGroup.askTimeout", "60s");
    c.set("celeborn.client.rpc.commitFiles.askTimeout", "60s");
    c.set("celeborn.client.push.timeout", "30s");
    c.set("celeborn.data.push.timeoutCheck.interval", "2s");
    c.set("celeborn.client.push.revive.maxRetries", "3");
    // FlinkShuffleClientImpl.retrySendMessage: 3 tries 5 s apart by default
    c.set("celeborn.push.io.maxRetries", "2");
    c.set("celeborn.push.io.retryWait", "1s");
    return c;
  }

  final CelebornConf conf;
  final LifecycleManager lifecycleManager;
  final String appId;
  final long lifecycleManagerTimestamp = System.currentTimeMillis();
  private final List<FlinkDriverClient> taskManagers = Collections.synchronizedList(new ArrayList<>());
  private final Map<Integer, Dataset> datasets = new ConcurrentHashMap<>();
  private final AtomicInteger nextShuffleId = new AtomicInteger();

  /** RemoteShuffleMaster.registerJob: the application id and the LifecycleManager. */
  public FlinkDriver(String masterEndpoint) {
    this(masterEndpoint, false);
  }

  /** As {@link #FlinkDriver(String)}, with Celeborn's authentication on or off. */
  public FlinkDriver(String masterEndpoint, boolean auth) {
    this.conf = conf(masterEndpoint, auth);
    // FlinkUtils.toCelebornAppId: "<lifecycleManagerTimestamp>-<JobID hex>"
    SplittableRandom r = new SplittableRandom();
    this.appId = lifecycleManagerTimestamp + "-" + String.format("%016x%016x", r.nextLong(), r.nextLong());
    this.lifecycleManager = new LifecycleManager(appId, conf);
    log("LifecycleManager for %s at %s:%d", appId, lifecycleManager.getHost(), lifecycleManager.getPort());
  }

  /** A TaskManager's shuffle client (FlinkShuffleClientImpl.get with the LM's host and port). */
  public FlinkDriverClient newTaskManager() {
    FlinkDriverClient c =
        new FlinkDriverClient(appId, lifecycleManager.getHost(), lifecycleManager.getPort(), conf);
    c.setPushRecorder((shuffleId, mapId, attemptId, body) -> {
      Dataset d = datasets.get(shuffleId);
      if (d != null) {
        d.recordPush(mapId, body);
      }
    });
    taskManagers.add(c);
    return c;
  }

  public String shuffleKey(int shuffleId) {
    return appId + "-" + shuffleId;
  }

  /**
   * A new shuffle (ShuffleTaskInfo: shuffle ids from 0; partition ids handed out in the order the
   * producers register, here a permutation of the map ids so that they differ; attempt 0).
   */
  public Dataset newDataset(int numMappers, int numSubs, int numRegions, int bufferSize, long seed) {
    int shuffleId = nextShuffleId.getAndIncrement();
    Dataset d = new Dataset(shuffleId, numMappers, numSubs, numRegions, bufferSize, seed);
    datasets.put(shuffleId, d);
    return d;
  }

  /** The shape of one record stream, plus what was pushed. */
  public static final class Dataset {
    public final int shuffleId;
    public final int numMappers;
    public final int numSubs;
    public final int numRegions;
    public final int bufferSize;
    public final long seed;
    public final int[] partitionIds;
    public final int[] attemptIds;
    /** mapId -> regions -> sub-partition -> pushed records (header included). */
    private final Map<Integer, List<List<List<byte[]>>>> pushed = new ConcurrentHashMap<>();
    private final Map<Integer, Integer> currentRegion = new ConcurrentHashMap<>();
    final Map<Integer, PartitionLocation> locations = new ConcurrentHashMap<>();

    Dataset(int shuffleId, int numMappers, int numSubs, int numRegions, int bufferSize, long seed) {
      this.shuffleId = shuffleId;
      this.numMappers = numMappers;
      this.numSubs = numSubs;
      this.numRegions = numRegions;
      this.bufferSize = bufferSize;
      this.seed = seed;
      this.partitionIds = new int[numMappers];
      this.attemptIds = new int[numMappers];
      // producers register in a shuffled order: partition id != map id
      List<Integer> order = new ArrayList<>();
      for (int m = 0; m < numMappers; m++) {
        order.add(m);
      }
      Collections.shuffle(order, new java.util.Random(seed));
      for (int i = 0; i < numMappers; i++) {
        partitionIds[order.get(i)] = i;
      }
    }

    /** Regions per map task: the data regions, then the EndOfPartition broadcast region. */
    public int totalRegions() {
      return numRegions + 1;
    }

    public boolean isBroadcast(int mapId, int region) {
      return region == numRegions || (region == 1 && mapId % 3 == 1);
    }

    /** Flink buffers of (map, region, sub): 0..3 (0: the sub-partition has nothing in this region). */
    public int numBuffers(int mapId, int region, int sub) {
      if (region == numRegions) {
        return sub == 0 ? 1 : 0;
      }
      if (isBroadcast(mapId, region)) {
        return sub == 0 ? 3 : 0;
      }
      return (mapId * 7 + region * 3 + sub * 5) % 4;
    }

    /** The data of one Flink buffer: 24 identifying bytes, then pseudo-random ones. */
    public byte[] bufferData(int mapId, int region, int sub, int seq) {
      if (region == numRegions) {
        return new byte[4]; // EndOfPartitionEvent, serialized by Flink's EventSerializer as int 0
      }
      SplittableRandom r = new SplittableRandom(seed * 1_000_003L + ((long) mapId << 40) + ((long) region << 28)
          + ((long) sub << 12) + seq);
      int max = bufferSize - FlinkOutputGate.HEADER_LENGTH;
      int len = r.nextInt(3) == 0 ? 24 + r.nextInt(1500) : 2000 + r.nextInt(max - 2000 + 1);
      byte[] b = new byte[len];
      r.nextBytes(b);
      java.nio.ByteBuffer.wrap(b).putInt(0x464C4E4B).putInt(mapId).putInt(region).putInt(sub).putInt(seq)
          .putInt(len);
      return b;
    }

    void startRegion(int mapId, int region) {
      currentRegion.put(mapId, region);
      List<List<List<byte[]>>> regions = pushed.computeIfAbsent(mapId, k -> Collections.synchronizedList(new ArrayList<>()));
      while (regions.size() <= region) {
        List<List<byte[]>> subs = new ArrayList<>();
        for (int s = 0; s < numSubs; s++) {
          subs.add(Collections.synchronizedList(new ArrayList<>()));
        }
        regions.add(subs);
      }
    }

    void recordPush(int mapId, ByteBuf body) {
      byte[] bytes = new byte[body.readableBytes()];
      body.getBytes(body.readerIndex(), bytes);
      int sub = java.nio.ByteBuffer.wrap(bytes).getInt(0);
      int region = currentRegion.get(mapId);
      pushed.get(mapId).get(region).get(sub).add(bytes);
    }

    public long pushedBytes() {
      long n = 0;
      for (List<List<List<byte[]>>> regions : pushed.values()) {
        for (List<List<byte[]>> subs : regions) {
          for (List<byte[]> recs : subs) {
            for (byte[] b : recs) {
              n += b.length;
            }
          }
        }
      }
      return n;
    }

    public PartitionLocation location(int mapId) {
      return locations.get(mapId);
    }
  }

  /** One expected READ_DATA body and where it came from. */
  public record Expected(byte[] bytes, String what) {}

  /** The READ_DATA bodies a reader of {@code [subStart, subEnd]} of map task {@code mapId} must get, in order. */
  public static List<Expected> expected(Dataset d, int mapId, int subStart, int subEnd) {
    List<Expected> out = new ArrayList<>();
    List<List<List<byte[]>>> regions = d.pushed.get(mapId);
    if (regions == null) {
      throw new IllegalStateException("map " + mapId + " of shuffle " + d.shuffleId + " pushed nothing");
    }
    for (int r = 0; r < regions.size(); r++) {
      boolean bc = d.isBroadcast(mapId, r);
      for (int s = subStart; s <= subEnd; s++) {
        List<byte[]> recs = regions.get(r).get(bc ? 0 : s);
        for (int i = 0; i < recs.size(); i++) {
          out.add(new Expected(recs.get(i), String.format("map %d region %d%s sub %d record %d/%d", mapId, r,
              bc ? " (broadcast, sub 0's data)" : "", s, i + 1, recs.size())));
        }
      }
    }
    return out;
  }

  /**
   * Runs every map task of {@code d} ({@code parallelism} at a time, on {@code tm}) as a Flink
   * map task would: regions, then finish (MapperEnd; the LifecycleManager commits the partition),
   * then close. Returns the MapperEnd failures (empty when all succeeded).
   */
  public List<String> writeAll(FlinkDriverClient tm, Dataset d, int parallelism) throws InterruptedException {
    ExecutorService pool = Executors.newFixedThreadPool(parallelism, r -> {
      Thread t = new Thread(r, "flink-map-task");
      t.setDaemon(true);
      return t;
    });
    List<String> failures = Collections.synchronizedList(new ArrayList<>());
    try {
      List<Future<?>> fs = new ArrayList<>();
      for (int m = 0; m < d.numMappers; m++) {
        final int mapId = m;
        fs.add(pool.submit(() -> {
          try {
            writeMapTask(tm, d, mapId);
          } catch (Throwable t) {
            failures.add("map " + mapId + ": " + t);
            log("map task %d failed: %s", mapId, t);
            t.printStackTrace(System.out);
          }
        }));
      }
      for (Future<?> f : fs) {
        try {
          f.get(5, TimeUnit.MINUTES);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
          failures.add(e.toString());
        }
      }
    } finally {
      pool.shutdownNow();
    }
    return failures;
  }

  void writeMapTask(FlinkDriverClient tm, Dataset d, int mapId) throws IOException {
    FlinkOutputGate gate = new FlinkOutputGate(tm, d.shuffleId, mapId, d.attemptIds[mapId], d.partitionIds[mapId],
        d.numSubs, d.bufferSize, d.numMappers, conf.clientPushMaxReviveTimes());
    try {
      for (int r = 0; r < d.totalRegions(); r++) {
        boolean bc = d.isBroadcast(mapId, r);
        d.startRegion(mapId, r);
        gate.regionStart(bc);
        for (int s = 0; s < d.numSubs; s++) {
          for (int seq = 0; seq < d.numBuffers(mapId, r, s); seq++) {
            int type = r == d.numRegions ? FlinkOutputGate.EVENT_BUFFER : FlinkOutputGate.DATA_BUFFER;
            gate.write(FlinkOutputGate.flinkBuffer(d.bufferSize, type, d.bufferData(mapId, r, s, seq)), bc ? 0 : s);
          }
        }
        gate.regionFinish();
      }
      gate.finish();
      d.locations.put(mapId, gate.location());
    } finally {
      gate.close();
    }
  }

  /** GetReducerFileGroup as a reader does it: the committed map partitions of the shuffle. */
  public ReduceFileGroups fileGroups(FlinkDriverClient tm, Dataset d) throws IOException {
    return tm.updateFileGroup(d.shuffleId, d.partitionIds[0]);
  }

  /** RemoteShuffleMaster.unregisterJob: the LifecycleManager unregisters the shuffle. */
  public void unregister(Dataset d) {
    lifecycleManager.unregisterShuffle(d.shuffleId);
    datasets.remove(d.shuffleId);
    for (FlinkDriverClient c : taskManagers) {
      c.cleanupShuffle(d.shuffleId);
    }
  }

  @Override
  public void close() {
    synchronized (taskManagers) {
      for (FlinkDriverClient c : taskManagers) {
        try {
          c.shutdown();
        } catch (RuntimeException e) {
          log("client shutdown: %s", e);
        }
      }
      taskManagers.clear();
    }
    try {
      lifecycleManager.stop();
    } catch (RuntimeException e) {
      log("LifecycleManager stop: %s", e);
    }
  }

  // ------------------------------------------------------------------ reading and checking

  /** Reads outcome of one stream. */
  public record ReadResult(String reader, int records, long bytes, int backlogs, long credits, long endNanos) {}

  /** Short description of a READ_DATA body: its batch header and, for data, the identifying bytes. */
  static String describe(byte[] b) {
    if (b.length < 16) {
      return b.length + " bytes (no batch header)";
    }
    java.nio.ByteBuffer bb = java.nio.ByteBuffer.wrap(b);
    String s = String.format("%d bytes, header{sub %d, attempt %d, batch %d, len %d}", b.length, bb.getInt(0),
        bb.getInt(4), bb.getInt(8), bb.getInt(12));
    if (b.length >= FlinkOutputGate.HEADER_LENGTH + 24 && bb.getInt(FlinkOutputGate.HEADER_LENGTH) == 0x464C4E4B) {
      int o = FlinkOutputGate.HEADER_LENGTH;
      s += String.format(" first buffer{map %d, region %d, sub %d, seq %d}", bb.getInt(o + 4), bb.getInt(o + 8),
          bb.getInt(o + 12), bb.getInt(o + 16));
    }
    return s;
  }

  /** Called after each data buffer is checked, with its index in the expected list. */
  public interface AfterData {
    void accept(int index) throws Exception;
  }

  /**
   * Consumes {@code reader}'s events and checks them against {@code expected} from index {@code
   * from}: every READ_DATA body byte for byte and in order, nothing extra, then the worker's
   * BUFFER_STREAM_END; no TRANSPORTABLE_ERROR, no READ_DATA beyond the credit granted. {@code
   * afterData} runs after each buffer (default: {@link FlinkStreamReader#consumed}). Fails with
   * the state of the stream if nothing arrives for {@code idleSeconds}.
   */
  public static ReadResult drain(FlinkStreamReader reader, List<Expected> expected, int from, int idleSeconds,
      AfterData afterData) throws Exception {
    return drain(reader, expected, from, idleSeconds, afterData, () -> false);
  }

  /** Thrown by {@link #drain} when {@code abort} became true (another stream failed). */
  public static final class Aborted extends RuntimeException {
    Aborted(String reader) {
      super(reader + ": aborted (another stream failed)");
    }
  }

  /** As above; gives up with {@link Aborted} as soon as {@code abort} is true. */
  public static ReadResult drain(FlinkStreamReader reader, List<Expected> expected, int from, int idleSeconds,
      AfterData afterData, java.util.function.BooleanSupplier abort) throws Exception {
    int i = from;
    long bytes = 0;
    while (true) {
      FlinkStreamReader.Event ev = null;
      long idleUntil = System.nanoTime() + TimeUnit.SECONDS.toNanos(idleSeconds);
      while (ev == null && System.nanoTime() < idleUntil) {
        if (abort.getAsBoolean()) {
          throw new Aborted(reader.name());
        }
        ev = reader.events().poll(200, TimeUnit.MILLISECONDS);
      }
      if (ev == null) {
        throw new AssertionError(String.format(
            "%s: nothing arrived for %d s after %d of %d records (granted %d credits, received %d ReadData, %d "
                + "backlog announcements totalling %d, streams %s)",
            reader.name(), idleSeconds, i, expected.size(), reader.granted(), reader.received(), reader.backlogs(),
            reader.backlogTotal(), reader.streamIds()));
      }
      switch (ev.kind()) {
        case DATA -> {
          if (i >= expected.size()) {
            throw new AssertionError(String.format("%s: READ_DATA beyond the %d expected records: %s", reader.name(),
                expected.size(), describe(ev.data())));
          }
          Expected e = expected.get(i);
          if (!Arrays.equals(e.bytes(), ev.data())) {
            throw new AssertionError(String.format("%s: record %d of %d differs: expected %s: %s; got %s",
                reader.name(), i, expected.size(), e.what(), describe(e.bytes()), describe(ev.data())));
          }
          bytes += ev.data().length;
          i++;
          if (afterData == null) {
            reader.consumed();
          } else {
            afterData.accept(i - 1);
          }
        }
        case END -> {
          if (!reader.bufferStream().onLastLocation()) {
            // a split partition: the next epoch's stream was opened, keep reading
            continue;
          }
          if (i < expected.size()) {
            throw new AssertionError(String.format("%s: BUFFER_STREAM_END after %d of %d records; next expected: %s",
                reader.name(), i, expected.size(), expected.get(i).what()));
          }
          if (!reader.violations().isEmpty()) {
            throw new AssertionError(reader.name() + ": credit violations: " + reader.violations());
          }
          return new ReadResult(reader.name(), i - from, bytes, reader.backlogs(), reader.granted(), ev.nanos());
        }
        case ERROR -> throw new AssertionError(String.format("%s: TRANSPORTABLE_ERROR after %d of %d records: %s",
            reader.name(), i, expected.size(), ev.error()));
        default -> throw new IllegalStateException();
      }
    }
  }

  /** One reading "input gate": a sub-partition range, read from every map partition. */
  public record ReadSpec(String name, int subStart, int subEnd, FlinkStreamReader.CreditMode mode, int initialCredit,
      int poolBuffers, int concurrentReadings) {}

  /**
   * Reads {@code d} with every consumer at once, each opening {@code concurrentReadings} map
   * partitions at a time with its own buffer pool (RemoteShuffleInputGate), and checks each stream
   * with {@link #drain}. Returns the results; throws the first failure (all are printed).
   */
  public List<ReadResult> readAll(FlinkDriverClient tm, Dataset d, List<ReadSpec> consumers, int idleSeconds)
      throws Exception {
    List<ReadResult> results = Collections.synchronizedList(new ArrayList<>());
    List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
    List<Thread> threads = new ArrayList<>();
    List<FlinkStreamReader> all = Collections.synchronizedList(new ArrayList<>());
    for (ReadSpec c : consumers) {
      FlinkStreamReader.CreditPool pool = c.mode() == FlinkStreamReader.CreditMode.POOL
          ? new FlinkStreamReader.CreditPool(c.poolBuffers(), d.bufferSize) : null;
      AtomicInteger nextMap = new AtomicInteger();
      for (int w = 0; w < c.concurrentReadings(); w++) {
        Thread t = new Thread(() -> {
          int m;
          while ((m = nextMap.getAndIncrement()) < d.numMappers && failures.isEmpty()) {
            FlinkStreamReader r = new FlinkStreamReader(
                String.format("%s[%d..%d] map %d (partition %d)", c.name(), c.subStart(), c.subEnd(), m,
                    d.partitionIds[m]),
                tm, d.shuffleId, d.partitionIds[m], c.subStart(), c.subEnd(), d.bufferSize, c.mode(), pool);
            all.add(r);
            try {
              r.open(c.initialCredit());
              results.add(drain(r, expected(d, m, c.subStart(), c.subEnd()), 0, idleSeconds, null,
                  () -> !failures.isEmpty()));
            } catch (Aborted e) {
              r.close();
            } catch (Throwable e) {
              failures.add(e);
              log("FAILED %s", e.getMessage());
              r.close();
            }
          }
        }, "flink-reader-" + c.name() + "-" + w);
        t.setDaemon(true);
        threads.add(t);
        t.start();
      }
    }
    for (Thread t : threads) {
      t.join(TimeUnit.MINUTES.toMillis(5));
    }
    if (!failures.isEmpty()) {
      Throwable first = failures.get(0);
      for (Throwable f : failures.subList(1, failures.size())) {
        first.addSuppressed(f);
      }
      if (first instanceof Exception e) {
        throw e;
      }
      throw (Error) first;
    }
    // Nothing may come for a stream once the worker ended it.
    Thread.sleep(200);
    for (FlinkStreamReader r : all) {
      for (long id : r.streamIds()) {
        long n = tm.getReadClientHandler().unexpectedFor(id);
        if (n > 0) {
          throw new AssertionError(r.name() + ": " + n + " message(s) for stream " + id + " after its BUFFER_STREAM_END");
        }
      }
    }
    return results;
  }

  /** Map id whose partition id is {@code partitionId}. */
  static int mapOf(Dataset d, int partitionId) {
    for (int m = 0; m < d.numMappers; m++) {
      if (d.partitionIds[m] == partitionId) {
        return m;
      }
    }
    throw new IllegalArgumentException("no map task has partition " + partitionId);
  }

  static Set<Integer> partitionIdSet(Dataset d) {
    Set<Integer> s = new java.util.TreeSet<>();
    for (int p : d.partitionIds) {
      s.add(p);
    }
    return s;
  }
}
