package searchwire.harness;

import java.util.Collection;
import java.util.function.Predicate;
import java.util.function.Supplier;

import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.features.NodeFeature;
import org.elasticsearch.rest.RestHandler;

/** {@link RootInfo} registered through the 9.x {@code getRestHandlers} (the services in one record). */
public final class RootInfoPlugin extends RootInfo {

    @Override
    public Collection<RestHandler> getRestHandlers(
        RestHandlersServices services,
        Supplier<DiscoveryNodes> nodesInCluster,
        Predicate<NodeFeature> clusterSupportsFeature
    ) {
        return handlers();
    }
}
