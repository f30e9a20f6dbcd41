package dev.switchyard.it;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.Objects;
import java.util.SortedMap;
import java.util.TreeSet;

/** Assertions that report sizes and the first differences instead of printing whole results. */
public final class Compare {

  private static final int MAX_SHOWN = 10;

  private Compare() {}

  /** Same elements in the same order. */
  public static <T> void sameList(String what, List<T> expected, List<T> actual) {
    if (expected.equals(actual)) {
      return;
    }
    StringBuilder sb = new StringBuilder();
    sb.append(what).append(": lists differ (expected ").append(expected.size())
        .append(" elements, got ").append(actual.size()).append(")\n");
    int shown = 0;
    int n = Math.max(expected.size(), actual.size());
    for (int i = 0; i < n && shown < MAX_SHOWN; i++) {
      Object e = i < expected.size() ? expected.get(i) : "<none>";
      Object a = i < actual.size() ? actual.get(i) : "<none>";
      if (!Objects.equals(e, a)) {
        sb.append("  [").append(i).append("] expected ").append(abbrev(e)).append(", got ").append(abbrev(a)).append('\n');
        shown++;
      }
    }
    throw new AssertionError(sb.toString());
  }

  /** Same keys with equal values (both maps sorted by key). */
  public static <K, V> void sameMap(String what, SortedMap<K, V> expected, SortedMap<K, V> actual) {
    if (expected.equals(actual)) {
      return;
    }
    StringBuilder sb = new StringBuilder();
    sb.append(what).append(": maps differ (expected ").append(expected.size())
        .append(" keys, got ").append(actual.size()).append(")\n");
    TreeSet<K> keys = new TreeSet<>(expected.comparator());
    keys.addAll(expected.keySet());
    keys.addAll(actual.keySet());
    int shown = 0;
    for (Iterator<K> it = keys.iterator(); it.hasNext() && shown < MAX_SHOWN; ) {
      K k = it.next();
      boolean inE = expected.containsKey(k);
      boolean inA = actual.containsKey(k);
      if (!inA) {
        sb.append("  missing key ").append(abbrev(k)).append('\n');
      } else if (!inE) {
        sb.append("  unexpected key ").append(abbrev(k)).append(" = ").append(abbrev(actual.get(k))).append('\n');
      } else if (!Objects.equals(expected.get(k), actual.get(k))) {
        sb.append("  key ").append(abbrev(k)).append(": expected ").append(abbrev(expected.get(k)))
            .append(", got ").append(abbrev(actual.get(k))).append('\n');
      } else {
        continue;
      }
      shown++;
    }
    throw new AssertionError(sb.toString());
  }

  /** Same multiset: compares sorted copies. */
  public static <T extends Comparable<? super T>> void sameMultiset(String what, List<T> expected, List<T> actual) {
    List<T> e = new ArrayList<>(expected);
    List<T> a = new ArrayList<>(actual);
    e.sort(null);
    a.sort(null);
    sameList(what + " (as sorted multisets)", e, a);
  }

  static String abbrev(Object o) {
    String s = String.valueOf(o);
    return s.length() > 200 ? s.substring(0, 200) + "...(" + s.length() + " chars)" : s;
  }
}
