package searchwire.harness;

import java.util.Collection;
import java.util.List;

import org.elasticsearch.Build;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.cluster.ClusterState;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.index.IndexVersion;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.RestChannel;
import org.elasticsearch.rest.RestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

/**
 * Serves {@code GET /} and {@code HEAD /}. In a real distribution the {@code rest-root} module
 * does this; that module is not published to Maven Central, so without this plugin the
 * jar-launched node answers 405. The document has the fields and values of the real one, taken
 * from the server jar's build info (version, flavor, type, hash, date, Lucene version, the
 * compatibility versions). The {@code X-Elastic-Product: Elasticsearch} header is added by
 * Elasticsearch's own REST controller, to this answer as to every other.
 *
 * The handler is the same on every major; how a plugin registers REST handlers is not, so
 * each major's {@code RootInfoPlugin} (src/major8, src/major9) extends this class and returns
 * {@link #handlers()} from its {@code getRestHandlers}.
 */
public abstract class RootInfo extends Plugin implements ActionPlugin {

    private volatile ClusterService clusterService;

    @Override
    public Collection<?> createComponents(PluginServices services) {
        this.clusterService = services.clusterService();
        return List.of();
    }

    /** The handlers of {@code GET /} and {@code HEAD /}. */
    protected final Collection<RestHandler> handlers() {
        return List.of(new RootHandler());
    }

    private final class RootHandler implements RestHandler {
        @Override
        public List<Route> routes() {
            return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
        }

        @Override
        public String getName() {
            return "searchwire_harness_root_action";
        }

        @Override
        public void handleRequest(RestRequest request, RestChannel channel, NodeClient client) throws Exception {
            final ClusterState state = clusterService.state();
            final Build build = Build.current();
            final XContentBuilder b = channel.newBuilder();
            b.startObject();
            b.field("name", clusterService.localNode().getName());
            b.field("cluster_name", state.getClusterName().value());
            b.field("cluster_uuid", state.metadata().clusterUUID());
            b.startObject("version")
                .field("number", build.qualifiedVersion())
                .field("build_flavor", build.flavor())
                .field("build_type", build.type().displayName())
                .field("build_hash", build.hash())
                .field("build_date", build.date())
                .field("build_snapshot", build.isSnapshot())
                .field("lucene_version", IndexVersion.current().luceneVersion().toString())
                .field("minimum_wire_compatibility_version", build.minWireCompatVersion())
                .field("minimum_index_compatibility_version", build.minIndexCompatVersion())
                .endObject();
            b.field("tagline", "You Know, for Search");
            b.endObject();
            channel.sendResponse(new RestResponse(RestStatus.OK, b));
        }
    }
}
