package searchwire.compat;

import co.elastic.clients.elasticsearch.ElasticsearchClient;
import co.elastic.clients.elasticsearch._helpers.bulk.BulkIngester;
import co.elastic.clients.elasticsearch._helpers.bulk.BulkListener;
import co.elastic.clients.elasticsearch.core.BulkRequest;
import co.elastic.clients.elasticsearch.core.BulkResponse;
import co.elastic.clients.elasticsearch.core.bulk.BulkResponseItem;
import co.elastic.clients.json.jackson.JacksonJsonpMapper;
import co.elastic.clients.transport.rest_client.RestClientTransport;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.http.HttpHost;
import org.elasticsearch.client.RestClient;

/**
 * elasticsearch-java (the official Java client), unmodified, as an application uses it,
 * pointed at one endpoint: {@code java -cp ... searchwire.compat.ElasticsearchJavaClient URL INDEX}.
 *
 * <p>First the ordinary start-up calls: info(), an index template for INDEX (3 shards, 1
 * replica, {@code id} keyword, {@code n} long) and the index. Then a {@link BulkIngester}
 * with its defaults but a 1 s flush interval (by default it flushes on size only, which at
 * this pace would be one bulk in the whole outage) writes documents {@code {"id":
 * "doc-NNNNNN", "n": N, "msg": ...}} with {@code _id} "doc-NNNNNN" and the {@code create}
 * action at about COMPAT_RATE (default 100) per second until a line "stop" arrives on stdin
 * (or 20,000 documents, or 300 s). Its listener names every item's outcome. Then
 * "written", a wait for a line "search", a refresh, a search and a count, and a JSON summary
 * as the last line. The line protocol is described in compat/README.md.
 */
public final class ElasticsearchJavaClient {
  private static final int MAX_DOCS = 20_000;
  private static final long MAX_MILLIS = 300_000;

  private static synchronized void emit(String line) {
    System.out.println(line);
    System.out.flush();
  }

  interface Call {
    Object run() throws Exception;
  }

  private static Object attempt(Call call) {
    try {
      return call.run();
    } catch (Exception e) {
      String text = "error: " + e.getClass().getSimpleName() + ": " + e.getMessage();
      return text.length() > 800 ? text.substring(0, 800) : text;
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 2) {
      System.err.println("usage: ElasticsearchJavaClient URL INDEX");
      System.exit(2);
    }
    String url = args[0];
    String index = args[1];
    double rate = 100;
    try {
      rate = Double.parseDouble(System.getenv().getOrDefault("COMPAT_RATE", "100"));
    } catch (NumberFormatException e) {
      // keep the default
    }

    AtomicBoolean stop = new AtomicBoolean();
    CountDownLatch search = new CountDownLatch(1);
    Thread control =
        new Thread(
            () -> {
              try (BufferedReader in =
                  new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                  if (line.trim().equals("stop")) stop.set(true);
                  if (line.trim().equals("search")) search.countDown();
                }
              } catch (Exception e) {
                // stdin gone: as if closed
              }
              // stdin closed: the test is gone.
              stop.set(true);
              search.countDown();
            });
    control.setDaemon(true);
    control.start();

    RestClient rest = RestClient.builder(HttpHost.create(url)).build();
    ElasticsearchClient es =
        new ElasticsearchClient(new RestClientTransport(rest, new JacksonJsonpMapper()));
    Map<String, Object> summary = new LinkedHashMap<>();
    summary.put("client", "elasticsearch-java " + co.elastic.clients.transport.Version.VERSION);
    summary.put("mode", "BulkIngester");
    summary.put("info", attempt(() -> es.info().version().number()));
    summary.put(
        "template",
        attempt(
            () ->
                es.indices()
                    .putIndexTemplate(
                        t ->
                            t.name(index + "-template")
                                .indexPatterns(index)
                                .template(
                                    tt ->
                                        tt.settings(s -> s.numberOfShards("3").numberOfReplicas("1"))
                                            .mappings(
                                                m ->
                                                    m.properties("id", p -> p.keyword(k -> k))
                                                        .properties("n", p -> p.long_(l -> l)))))
                    .acknowledged()));
    summary.put("create_index", attempt(() -> es.indices().create(c -> c.index(index)).acknowledged()));

    List<String> errors = Collections.synchronizedList(new ArrayList<>());
    BulkListener<String> listener =
        new BulkListener<>() {
          @Override
          public void beforeBulk(long executionId, BulkRequest request, List<String> contexts) {}

          @Override
          public void afterBulk(
              long executionId, BulkRequest request, List<String> contexts, BulkResponse response) {
            for (int i = 0; i < contexts.size(); i++) {
              BulkResponseItem item = response.items().get(i);
              if (item.error() == null) {
                emit("acked " + contexts.get(i));
              } else {
                errors.add(contexts.get(i) + ": " + item.status() + " " + item.error().type() + ": " + item.error().reason());
              }
            }
          }

          @Override
          public void afterBulk(
              long executionId, BulkRequest request, List<String> contexts, Throwable failure) {
            errors.add("bulk of " + contexts.size() + " failed: " + failure);
          }
        };
    BulkIngester<String> ingester =
        BulkIngester.of(b -> b.client(es).flushInterval(1, TimeUnit.SECONDS).listener(listener));
    try {
      long start = System.currentTimeMillis();
      int n = 0;
      while (!stop.get() && n < MAX_DOCS && System.currentTimeMillis() - start < MAX_MILLIS) {
        String id = String.format("doc-%06d", n);
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("id", id);
        doc.put("n", n);
        doc.put("msg", "small document " + n);
        ingester.add(op -> op.create(c -> c.index(index).id(id).document(doc)), id);
        n++;
        if (n % 50 == 0) emit("progress " + n);
        // Paced by the clock, so slow answers do not lower the total.
        long ahead = start + (long) (n * 1000 / rate) - System.currentTimeMillis();
        if (ahead > 0) Thread.sleep(ahead);
      }
      emit("progress " + n);
    } catch (Exception e) {
      errors.add("writing: " + e);
    }
    ingester.close();
    summary.put("error_count", errors.size());
    summary.put("errors", new ArrayList<>(errors.subList(0, Math.min(5, errors.size()))));

    emit("written");
    search.await();
    summary.put(
        "refresh",
        attempt(
            () -> {
              es.indices().refresh(r -> r.index(index));
              return true;
            }));
    summary.put(
        "search_total",
        attempt(
            () ->
                es.search(s -> s.index(index).size(0).trackTotalHits(t -> t.enabled(true)), Void.class)
                    .hits()
                    .total()
                    .value()));
    summary.put("count", attempt(() -> es.count(c -> c.index(index)).count()));
    emit(new ObjectMapper().writeValueAsString(summary));
    rest.close();
    System.exit(0);
  }
}
